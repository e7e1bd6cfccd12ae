"""The crawl stores the same thing whether parsing and extraction run in worker
processes or in the crawl process."""

from __future__ import annotations

from conftest import CORPUS, FIXTURES, Project, source_entry


def test_results_are_identical_with_the_pool_on_and_off(site, tmp_path):
    site_, server = site
    site_.load_dir(FIXTURES / "site")
    sources = [
        source_entry("linux", server.url("/linux.rss")),
        source_entry("tech", server.url("/tech.atom"), direction="tech"),
    ]
    koi8r = CORPUS / "feeds" / "miniflux" / "encoding" / "koi8r.xml"
    if koi8r.exists():
        site_.put("/koi8r.xml", koi8r.read_bytes(), "application/rss+xml; charset=koi8-r")
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
