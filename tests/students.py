"""Student-style copies of the reference and of its mutants (``tests/mutants.py``): the same program, but written
the way people publish it, without ``CONFORMANCE_ROLES``, so that the suite has to *discover* which class plays
which role (``adapters/binding.py``).

A style renames, generically for any reference-derived source:

* classes and module-level functions (``MultiHeadAttention`` -> ``MultiHeadedAttention`` or
  ``MultiHeadAttentionBlock``, ``subsequent_mask`` -> ``causal_mask``, ...), everywhere they are used;
* parameters, consistently inside each function (its body, its defaults and the lambdas in it, unless they shadow
  the name), and the keywords of calls to the renamed classes and functions (``d_model`` -> ``features``,
  ``h`` -> ``heads``, ``memory`` -> ``encoder_output``, ...). Attributes (``self.h``) keep their names.

The renaming works on the syntax tree (``ast``) and the file is written back with ``ast.unparse``: comments go,
docstrings stay. A renamed parameter never takes the name of another variable of the same function.

    from tests import mutants, students
    path = students.write(mutants.BY_NAME["attention_unscaled"], tmp_dir, "blocks")
    # pytest conformance --impl=<path>       (discovery maps MultiHeadAttentionBlock onto multi_head_attention, ...)
"""
import ast
from dataclasses import dataclass, field
from pathlib import Path

from tests import mutants as catalogue


@dataclass(frozen=True)
class Style:
    """How one community names things: classes and functions, parameters everywhere, parameters per function."""
    name: str
    description: str
    classes: dict                                   # reference name -> student name (classes and functions)
    parameters: dict                                # parameter -> student name, in every function
    per_function: dict = field(default_factory=dict)  # "Class" / "Class.method" / "function" -> {parameter: name}
    extra: str = ""                                 # code appended (wrappers such as make_model)
    known_gaps: dict = field(default_factory=dict)  # mutant name -> why the checker cannot name it in this style


ANNOTATED = Style(
    "annotated", "class names of the Annotated Transformer (Harvard NLP), features/heads/d_hidden/p_drop",
    classes={
        "TokenEmbedding": "Embeddings", "SinusoidalPositionalEncoding": "PositionalEncoding",
        "scaled_dot_product_attention": "attention", "MultiHeadAttention": "MultiHeadedAttention",
        "FeedForwardNetwork": "PositionwiseFeedForward", "AddAndNorm": "SublayerConnection", "EncoderStack": "Encoder",
        "DecoderStack": "Decoder", "OutputLayer": "Generator", "Transformer": "EncoderDecoder",
        "padding_mask": "make_src_mask", "sinusoidal_table": "sinusoid_table",
    },
    parameters={"d_model": "features", "h": "heads", "d_ff": "d_hidden", "dropout": "p_drop",
                "vocab_size": "vocab", "pad_idx": "pad"},
    per_function={
        "SublayerConnection": {"d_model": "size"}, "EncoderLayer": {"d_model": "size"},
        "DecoderLayer": {"d_model": "size"}, "make_src_mask": {"tokens": "src"},
    },
    extra='''

def make_model(src_vocab, tgt_vocab, N=6, features=512, d_hidden=2048, heads=8, p_drop=0.1):
    """The whole encoder-decoder, its sizes given in the order code of this style lists them."""
    return EncoderDecoder(src_vocab, tgt_vocab, N, features, d_hidden, heads, p_drop)
''',
)

BLOCKS = Style(
    "blocks", "class names of popular video/blog code (MultiHeadAttentionBlock, ResidualConnection, ...), "
              "embed_dim/num_heads/dim_feedforward/dropout_rate",
    classes={
        "TokenEmbedding": "InputEmbeddings", "SinusoidalPositionalEncoding": "PositionalEncoding",
        "MultiHeadAttention": "MultiHeadAttentionBlock", "FeedForwardNetwork": "FeedForwardBlock",
        "LayerNorm": "LayerNormalization", "AddAndNorm": "ResidualConnection", "EncoderLayer": "EncoderBlock",
        "DecoderLayer": "DecoderBlock", "EncoderStack": "Encoder", "DecoderStack": "Decoder",
        "OutputLayer": "ProjectionLayer", "subsequent_mask": "causal_mask", "padding_mask": "create_padding_mask",
    },
    parameters={"d_model": "embed_dim", "h": "num_heads", "d_ff": "dim_feedforward", "dropout": "dropout_rate",
                "max_len": "seq_len", "N": "num_layers", "src_vocab": "src_vocab_size",
                "tgt_vocab": "tgt_vocab_size", "memory": "encoder_output", "pad_idx": "pad_token"},
    per_function={
        "LayerNormalization": {"d_model": "features"}, "ResidualConnection": {"d_model": "features"},
        "create_padding_mask": {"tokens": "seq"}, "causal_mask": {"size": "seq_len"},
    },
    extra='''

def build_transformer(src_vocab_size, tgt_vocab_size, seq_len=5000, embed_dim=512, num_layers=6, num_heads=8,
                      dropout_rate=0.1, dim_feedforward=2048):
    return Transformer(src_vocab_size, tgt_vocab_size, num_layers, embed_dim, dim_feedforward, num_heads,
                       dropout_rate, seq_len)
''',
)

TERSE = Style(
    "terse", "short names that say nothing of the role (LN, MHA, FFN, Residual, Block, ...), dim/n_heads/hidden/p",
    classes={
        "TokenEmbedding": "Tok", "SinusoidalPositionalEncoding": "Pos", "MultiHeadAttention": "MHA",
        "scaled_dot_product_attention": "sdpa", "FeedForwardNetwork": "FFN", "LayerNorm": "LN",
        "AddAndNorm": "Residual",
        "EncoderLayer": "EncBlock", "DecoderLayer": "DecBlock", "EncoderStack": "EncStack", "DecoderStack": "DecStack",
        "OutputLayer": "Head", "Transformer": "Seq2Seq", "sinusoidal_table": "sin_table",
        "subsequent_mask": "tril_mask", "padding_mask": "pad_mask",
    },
    parameters={"d_model": "dim", "h": "n_heads", "d_ff": "hidden", "dropout": "p", "vocab_size": "n_tokens",
                "src_vocab": "n_src", "tgt_vocab": "n_tgt", "N": "depth", "memory": "enc"},
)

STYLES = {s.name: s for s in (ANNOTATED, BLOCKS, TERSE)}


# -- renaming ------------------------------------------------------------------------------------------------------
def _arguments(node):
    a = node.args
    return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if x is not None]


def _bound_names(function):
    """Every name bound or read inside ``function`` (its parameters excluded): a new parameter name must not be one."""
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node is not function:
            names.add(node.name)
    return names - set(_arguments(function))


class _Renamer(ast.NodeTransformer):
    def __init__(self, style, module):
        self.style = style
        self.global_names = {n.name for n in module.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
        self.classes = [None]
        self.scopes = []          # [{old parameter: new}] of the enclosing functions
        self.constructor = {}     # student class/function name -> {old keyword: new} (its __init__/parameters)

    # the renames of one function's parameters
    def plan(self, function, owner):
        keys = [owner, f"{owner}.{function.name}"] if owner else [function.name]
        table = dict(self.style.parameters)
        for key in keys:
            table.update(self.style.per_function.get(key, {}))
        taken = _bound_names(function) | self.global_names | set(self.style.classes.values())
        arguments = _arguments(function)
        plan = {}
        for old in arguments:
            new = table.get(old)
            if new and new != old and new not in taken and new not in arguments and new not in plan.values():
                plan[old] = new
        return plan

    def lookup(self, name):
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def visit_ClassDef(self, node):
        node.name = self.style.classes.get(node.name, node.name)
        self.classes.append(node.name)
        self.generic_visit(node)
        self.classes.pop()
        return node

    def visit_FunctionDef(self, node):
        owner = self.classes[-1]
        if owner is None and not self.scopes:
            node.name = self.style.classes.get(node.name, node.name)
        plan = self.plan(node, owner if not self.scopes else None)
        if owner and node.name == "__init__":
            self.constructor[owner] = plan
        elif owner is None and not self.scopes:
            self.constructor[node.name] = plan
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        self.visit_defaults(node.args)  # defaults are evaluated outside the function
        self.scopes.append(plan)
        for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs + [node.args.vararg, node.args.kwarg]:
            if a is not None:
                a.arg = plan.get(a.arg, a.arg)
        node.body = [self.visit(s) for s in node.body]
        self.scopes.pop()
        return node

    def visit_defaults(self, arguments):
        arguments.defaults = [self.visit(d) for d in arguments.defaults]
        arguments.kw_defaults = [d if d is None else self.visit(d) for d in arguments.kw_defaults]

    def visit_Lambda(self, node):
        self.visit_defaults(node.args)
        shadow = {name: name for name in _arguments(node)}  # a lambda's own parameters hide the outer ones
        self.scopes.append(shadow)
        node.body = self.visit(node.body)
        self.scopes.pop()
        return node

    def visit_Name(self, node):
        new = self.lookup(node.id)
        if new is not None:
            node.id = new
        elif node.id in self.global_names:
            node.id = self.style.classes.get(node.id, node.id)
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        callee = node.func.id if isinstance(node.func, ast.Name) else None
        renames = self.constructor.get(callee, {})
        for keyword in node.keywords:
            if keyword.arg in renames:
                keyword.arg = renames[keyword.arg]
        return node


def _without_roles(module):
    """The module without its ``CONFORMANCE_ROLES = {...}`` (a student's code has none)."""
    module.body = [s for s in module.body if not (
        isinstance(s, (ast.Assign, ast.AnnAssign)) and any(
            isinstance(t, ast.Name) and t.id == "CONFORMANCE_ROLES"
            for t in (s.targets if isinstance(s, ast.Assign) else [s.target])))]
    return module


def restyle(source, style):
    """``source`` (the reference or a mutant of it) rewritten in ``style`` (a :class:`Style` or its name)."""
    style = STYLES[style] if isinstance(style, str) else style
    module = _without_roles(ast.parse(source))
    renamer = _Renamer(style, module)
    # two passes: the first learns every function's parameter renames (keywords of calls before the definition)
    renamer.visit(ast.parse(ast.unparse(module)))
    known = dict(renamer.constructor)
    renamer = _Renamer(style, module)
    renamer.constructor = known
    text = ast.unparse(ast.fix_missing_locations(renamer.visit(module)))
    return text + "\n" + style.extra


def header(mutant, style):
    what = "the reference" if mutant is None else f"mutant {mutant.name!r} ({mutant.description})"
    return f"# -*- coding: utf-8 -*-\n# {what}, written in the {style} style (no CONFORMANCE_ROLES)\n"


def source(mutant, style):
    """The student-style program of ``mutant`` (None: of the unmodified reference)."""
    base = catalogue.reference_source() if mutant is None else catalogue.apply(mutant)
    return header(mutant, style) + restyle(base, style)


def write(mutant, directory, style):
    """Write the student-style ``mutant`` (None: the reference) as ``<directory>/<name>_<style>.py``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{'reference' if mutant is None else mutant.name}_{style}.py"
    path.write_text(source(mutant, style))
    return path
