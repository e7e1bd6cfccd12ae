"""Item pipelines, one job each: normalize → hash → dedup → write (or print on a dry run)."""
