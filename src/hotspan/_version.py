"""The package's version, in a module of its own: ``_api`` needs it at drain time, and
importing it from the package's ``__init__`` (which imports ``_api``) would be a cycle."""

__version__ = "0.1.0"
