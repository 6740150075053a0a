"""seqformer: an encoder-decoder Transformer split over a few modules."""
import seqformer.constants
from seqformer.models import Transformer
