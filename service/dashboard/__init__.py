"""Server-rendered dashboard (Jinja2 + inline SVG); no front-end build step."""
