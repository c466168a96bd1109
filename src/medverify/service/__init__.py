"""``medverify serve``: the HTTP service over the library (see docs/service.md)."""
