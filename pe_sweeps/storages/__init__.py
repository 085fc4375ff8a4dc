"""Where a sweep's study lives: SQLite, PostgreSQL, Redis or a journal file, opened from a URL, with heartbeats,
retries through an outage, passwords kept out of every printed line, and the lock that makes a read-then-write
step on the study atomic.

Public: `storage` (`open_storage`, `retrying`), `storage_url` (`storage_url`, `redact_url`, `hide_secrets`) and
`study_lock` (`StudyLock`). Private: `journal_storage`.
"""

__all__ = ["storage", "storage_url", "study_lock"]
