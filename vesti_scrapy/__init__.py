"""vesti_scrapy: a news collector built on Scrapy (feeds → posts in SQLite)."""
