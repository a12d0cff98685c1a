"""mkdocs hooks (mkdocs.yml): the site's home page is the README itself, its links made
relative to docs/, so the two never differ."""

from __future__ import annotations

from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[1] / "README.md"


def on_page_read_source(page: Any, config: Any) -> str | None:
    if page.file.src_uri != "index.md":
        return None
    text = README.read_text(encoding="utf-8")
    text = text.replace("](docs/adr/)", "](adr/0004-audit-db-apart-from-the-destination.md)")
    return text.replace("](docs/", "](").replace("[docs/", "[")
