"""The benchmark harness: `python -m bench.run` (see bench/run.py).

run.py is the command; passes.py the contenders and their passes against the fixture
server (site.py, server.py); measure.py measures a process tree; million.py builds the
1,000,000-post database; report.py writes the tables. floor.py and reader_pass.py are the
other systems, each a command of its own."""
