"""Built-in architectures, one module per family; each registers its builders when imported, which
``zoo/registry.py`` does on the first lookup of a name (it names the module of each)."""
