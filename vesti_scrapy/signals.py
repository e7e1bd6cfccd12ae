"""Signals of our own, beside Scrapy's."""

# Sent with ``request=`` when a middleware drops a request the spider yielded, for a
# reason that means its work is done already (DeltaFetch: the page was fetched by an
# earlier crawl), so that the spider can account for it. What a handler returns (other
# than None) goes on in the output in the request's place.
request_skipped = object()
