import transformer.Constants
import transformer.Modules
import transformer.Layers
import transformer.SubLayers
import transformer.Models
import transformer.Translator
import transformer.Optim

__all__ = [
    transformer.Constants, transformer.Modules, transformer.Layers,
    transformer.SubLayers, transformer.Models, transformer.Optim,
    transformer.Translator]
