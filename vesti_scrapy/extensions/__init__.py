"""Scrapy extensions: the crawl's database, its worker processes, its summary, and the
import jobs' lease heartbeat."""
