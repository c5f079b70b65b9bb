"""An example package of a user's own transfer methods (docs/custom_method.md)."""
