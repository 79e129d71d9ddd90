"""The production Celery app with the nightly cron compressed to every NIGHTLY_EVERY seconds (tests only)."""

from __future__ import annotations

import os

from service.config import get_settings
from workers.celery_app import NIGHTLY_TABLES, make_celery

app = make_celery(get_settings())
app.conf.beat_schedule = {
    "nightly-tables": {"task": NIGHTLY_TABLES, "schedule": float(os.environ.get("NIGHTLY_EVERY", "2"))},
}
