"""An example package of a user's own transfer methods (docs/guides/custom_method.md)."""
