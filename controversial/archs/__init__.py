"""Built-in architectures; importing this package registers them."""
from controversial.archs import abs_vae, kde, tiny, vgg  # noqa: F401
