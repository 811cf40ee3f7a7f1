"""Delivering the notification outbox to webhook subscriptions (docs/notifications.md)."""
