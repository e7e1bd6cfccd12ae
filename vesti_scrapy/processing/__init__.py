"""After the crawl: the worker pool that claims stored posts and classifies them."""
