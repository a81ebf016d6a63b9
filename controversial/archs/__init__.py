"""Built-in architectures; importing this package registers them."""
from controversial.archs import abs_vae, capsnet, kde, madry, pcn, tiny, vgg  # noqa: F401
