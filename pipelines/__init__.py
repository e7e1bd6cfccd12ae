"""Item pipelines, one job each: normalize → hash → dedup → store (or print on a dry run)."""
