"""The crawl stores the same thing whether parsing and extraction run in worker
processes or in the crawl process."""

from __future__ import annotations

from conftest import CORPUS, FIXTURES, Project, require, source_entry


def test_results_are_identical_with_the_pool_on_and_off(site, tmp_path):
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    sources = [
        source_entry("linux", server.url("/linux.rss")),
        source_entry("tech", server.url("/tech.atom"), direction="tech"),
    ]
    koi8r = CORPUS / "feeds" / "miniflux" / "encoding" / "koi8r.xml"
    require(koi8r.exists(), f"feed corpus not found at {CORPUS / 'feeds'}")
    # Its entries link to example.com: pointed at the fixture server (404s), never out.
    body = koi8r.read_bytes().replace(b"http://example.com", server.base_url.encode())
    site_.put("/koi8r.xml", body, "application/rss+xml; charset=koi8-r")
    sources.append(source_entry("koi8r", server.url("/koi8r.xml"), lang="ru"))
    site_.put("/broken.rss", b"<rss><channel><title>cut off", "application/rss+xml")
    sources.append(source_entry("broken", server.url("/broken.rss")))

    stored = {}
    for workers in (0, 2):
        project = Project(tmp_path / f"workers-{workers}")
        project.root.mkdir()
        project.write_sources(sources)
        result = project.crawl(settings={"VESTI_PROCESS_POOL_WORKERS": workers})
        assert ("worker process" in result.stderr) == (workers > 0)
        stored[workers] = (
            project.query(
                "SELECT s.slug, p.canonical_url, p.title, p.text, p.sha256, p.content_type, "
                "p.published_at FROM posts p JOIN sources s ON s.id = p.source_id "
                "ORDER BY p.canonical_url"
            ),
            project.query(
                "SELECT slug, status, error_count, last_error, etag FROM rss_state ORDER BY slug"
            ),
        )
    # The article both fixture feeds link to takes its source, title and date from
    # whichever feed is parsed first: compare only what it says for that one.
    shared = server.url("/articles/linux-6-19-rc1.html")
    for run in stored.values():
        run[0][:] = [
            row if row[1] != shared else (None, shared, None, *row[3:6], None) for row in run[0]
        ]
    assert stored[0] == stored[2]
    posts, states = stored[2]
    assert any(row[5] == "article" for row in posts)
    assert states[0][:3] == ("broken", "new", 1)


def _full_text_feed(name: str, base: str, entries: int = 3, words: int = 20) -> str:
    body = " ".join(f"Paragraph {n} of a full-text story in {name}." for n in range(words))
    items = "".join(
        f"<item><title>{name} story {n}</title><link>{base}/{name}/{n}</link>"
        f"<guid>{base}/{name}/{n}</guid><description>{body} ({n})</description></item>"
        for n in range(entries)
    )
    channel = f"<channel><title>{name}</title>{items}</channel>"
    return f'<?xml version="1.0"?><rss version="2.0">{channel}</rss>'


def test_a_parse_that_runs_over_the_job_timeout_fails_its_feed_and_the_crawl_goes_on(site, project):
    # One feed takes seconds to parse (6,000 entries), the others milliseconds: the slow
    # one is given up at the job timeout, its worker stopped and replaced, and the other
    # feeds are parsed in worker processes as before.
    site_, server = site
    names = ["one", "two", "three"]
    for name in names:
        site_.put(f"/{name}.rss", _full_text_feed(name, server.url("")), "application/rss+xml")
    site_.put("/heavy.rss", _full_text_feed("heavy", server.url(""), 6000), "application/rss+xml")
    project.write_sources(
        [source_entry(name, server.url(f"/{name}.rss")) for name in [*names, "heavy"]]
    )

    result = project.crawl(
        settings={"VESTI_PROCESS_POOL_WORKERS": 2, "VESTI_PROCESS_POOL_JOB_TIMEOUT": 0.75}
    )

    assert "answered nothing for 0.75 s" in result.stderr
    states = dict(project.query("SELECT slug, last_error FROM rss_state"))
    given_up = [slug for slug, error in states.items() if error and "parsing gave up" in error]
    assert given_up == ["heavy"]
    assert project.query("SELECT status, error_count FROM rss_state WHERE slug = 'heavy'") == [
        ("new", 1)
    ]
    stored = dict(
        project.query(
            "SELECT s.slug, count(*) FROM posts p JOIN sources s ON s.id = p.source_id "
            "GROUP BY s.slug"
        )
    )
    assert stored == {name: 3 for name in names}
