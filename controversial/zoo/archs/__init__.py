"""Built-in architectures; importing this package registers them."""

from controversial.zoo.archs import abs_vae, capsnet, jem, kde, madry, pcn, tiny, vgg, wrn  # noqa: F401
