from tmodels.decoder.config import DecoderOnlyConfig
from tmodels.decoder.models import DecoderOnly
from tmodels.vanilla_transformer.config import VanillaTransformerConfig
from tmodels.vanilla_transformer.models import VanillaTransformer
