"""A small HTTP client for the CLI (and CI scripts): one place that knows the routes and the error body."""

from __future__ import annotations

import contextlib
from typing import Any

import httpx


class ApiError(Exception):
    def __init__(self, status: int, body: Any):
        self.status = status
        self.body = body
        error = body.get("error", {}) if isinstance(body, dict) else {}
        super().__init__(f"HTTP {status}: {error.get('message') or body}")


class ApiUnreachable(Exception):
    """No HTTP answer at all: refused, timed out, a bad URL, or an answer that is not HTTP."""

    def __init__(self, url: str, error: Exception):
        self.url = url
        self.reason = str(error) or type(error).__name__
        super().__init__(f"cannot reach {url}: {self.reason}")


class TunebaseClient:
    def __init__(self, base_url: str, token: str | None, timeout: float = 30.0):
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)
        except (httpx.InvalidURL, ValueError) as error:
            raise ApiUnreachable(self.base_url, error) from None

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as error:
            raise ApiUnreachable(self.base_url, error) from None
        body: Any = response.text
        if "json" in response.headers.get("content-type", ""):
            with contextlib.suppress(ValueError):  # a proxy's broken JSON: keep the text
                body = response.json()
        if response.status_code >= 400:
            raise ApiError(response.status_code, body)
        return body

    def submit_sweep(self, spec: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        result: dict[str, Any] = self._call("POST", "/v1/sweeps", json=spec, headers=headers)
        return result

    def sweep(self, sweep_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", f"/v1/sweeps/{sweep_id}")
        return result

    def cancel_sweep(self, sweep_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", f"/v1/sweeps/{sweep_id}/cancel")
        return result

    def winners(self, **filters: Any) -> list[dict[str, Any]]:
        params = {k: v for k, v in filters.items() if v is not None}
        items: list[dict[str, Any]] = self._call("GET", "/v1/winners", params=params)["items"]
        return items

    def generate_table(
        self, arch: str, phase: str, dialect: str | None = None, kernel: str | None = None
    ) -> dict[str, Any]:
        """POST /v1/tables; the server picks the dialect when none is given (it follows the phase)."""
        body = {"arch": arch, "phase": phase, **({"dialect": dialect} if dialect else {})}
        body.update({"kernel": kernel} if kernel else {})
        result: dict[str, Any] = self._call("POST", "/v1/tables", json=body)
        return result

    def table_inc(self, table_id: int) -> str:
        text: str = self._call("GET", f"/v1/tables/{table_id}/inc")
        return text

    def sweeps(self, **filters: Any) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/v1/sweeps", params=_params(filters))
        return result

    def results(self, **filters: Any) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/v1/results", params=_params(filters))
        return result

    def dispatches_csv(self, measurement_id: int) -> str:
        path = f"/v1/measurements/{measurement_id}/dispatches"
        text: str = self._call("GET", path, params={"format": "csv"})
        return text

    def dispatches(self, measurement_id: int, limit: int = 100_000) -> dict[str, Any]:
        result: dict[str, Any] = self._call(
            "GET", f"/v1/measurements/{measurement_id}/dispatches", params={"limit": limit}
        )
        return result

    def devices(self, **filters: Any) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/v1/devices", params=_params(filters))
        return result

    def profiles(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/v1/profiles", params={"limit": 500})
        return result

    def report_observed(self, report: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "/v1/observed-shapes", json=_params(report))
        return result

    def observed(self, **filters: Any) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/v1/observed-shapes", params=_params(filters))
        return result

    def push_kernel(self, archive: bytes) -> dict[str, Any]:
        headers = {"Content-Type": "application/gzip"}
        result: dict[str, Any] = self._call("POST", "/v1/kernels", content=archive, headers=headers)
        return result

    def kernels(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/v1/kernels")
        return result

    def kernel(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", f"/v1/kernels/{name}")
        return result

    def kernel_version(self, name: str, version: str, arch: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self._call(
            "GET", f"/v1/kernels/{name}/{version}", params=_params({"arch": arch})
        )
        return result

    def analyze_kernel(self, name: str, version: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Compiles on the server: ``timeout`` covers every variant's compile."""
        path = f"/v1/kernels/{name}/{version}/analyze"
        result: dict[str, Any] = self._call("POST", path, json=_params(body), timeout=timeout)
        return result


def _params(values: dict[str, Any]) -> dict[str, Any]:
    """Drop unset filters so the server applies its defaults."""
    return {k: v for k, v in values.items() if v is not None}
