"""seqformer: an encoder-decoder Transformer split over a few modules that import one another by absolute name."""
import seqformer.masking
import seqformer.model
