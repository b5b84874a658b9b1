"""The tuning database in SQL: models, engine, the `Database` store and schema checks.

Only `service/` imports SQLAlchemy (STYLE.md habit 14); the tuner sees the
store through `tuner.database.Database`.
"""
