"""`extract FILE_OR_URL...`: the article text the crawler would store for pages."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import click

from vesti_scrapy.cli import fail, project_settings
from vesti_scrapy.text import extract_article


def _read_input(name: str, user_agent: str) -> tuple[bytes, str | None]:
    if name.startswith(("http://", "https://")):
        request = urllib.request.Request(name, headers={"User-Agent": user_agent})
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read(), name
    return Path(name).read_bytes(), None


@click.command()
@click.argument("inputs", nargs=-1, required=True, metavar="FILE_OR_URL...")
@click.option("--out", metavar="DIR", help="write <name>.txt per input into DIR")
def extract(inputs: tuple[str, ...], out: str | None) -> int:
    """Print the article text the crawler would store for pages (saved files or URLs)."""
    user_agent = project_settings()["VESTI_USER_AGENT"]
    out_dir = Path(out) if out else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    failures = 0
    for name in inputs:
        try:
            body, url = _read_input(name, user_agent)
        except OSError as exc:
            fail(f"{name}: {exc}")
            failures += 1
            continue
        text = extract_article(body, url=url)
        if out_dir is None:
            if len(inputs) > 1:
                click.echo(f"==> {name} <==")
            click.echo(text)
        else:
            stem = Path(name.rstrip("/").rsplit("/", 1)[-1]).stem or "index"
            (out_dir / f"{stem}.txt").write_text(text + "\n", encoding="utf-8")
    return 1 if failures else 0
