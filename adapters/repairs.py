"""Repairs of the mistakes that stop a class before its own code runs, so that the checks can still say what that
code computes: ``super().__init__()`` missing, ``super(Renamed, self)`` naming a class that does not exist, a
``forward`` indented into ``__init__``, ``self.name`` read where ``__init__`` assigned a close name
(``self.embed_size`` for ``self.embed_dim``) or never assigned a module its name spells (``self.dropout``), and a
name defined nowhere read where the method binds a close one (``slf_attn_mask`` for ``self_attn_mask``).

Each repair is a small rewrite of the class's syntax tree, compiled into a *copy* of the submission's namespace (the
code under test is never changed). The plugin runs a check that ended in an error again on the repaired code and
reports what it finds there *behind* the error, never in its place: the code as written still crashes.
"""
import ast
import copy
import difflib
import inspect
from dataclasses import dataclass

import torch.nn as nn

from adapters.lint import assigned_names, attributes_never_assigned, method_of, undefined_names

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass
class Repair:
    cls: str
    what: str
    where: tuple
    """(filename, line) of the class repaired."""


def calls_super_init(init):
    """Whether ``__init__`` calls ``super(...).__init__`` or ``Base.__init__(self, ...)``."""
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__"
               for node in ast.walk(init))


def insert_super_init(name, node, cls, namespace, assigned):
    """``super().__init__()`` as the first statement of a module's ``__init__`` that never initialises its base."""
    init = method_of(node, "__init__")
    if init is None or calls_super_init(init):
        return []
    docstring = ast.get_docstring(init, clean=False) is not None
    statement = ast.parse("super().__init__()").body[0]
    init.body.insert(int(docstring), ast.copy_location(statement, init.body[0]))
    return [f"super().__init__() inserted at the start of {name}.__init__"]


def drop_unknown_super_class(name, node, cls, namespace, assigned):
    """``super(X, self)`` where no class X exists (a class renamed since) becomes ``super()``."""
    done = []
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "super" \
                and call.args and isinstance(call.args[0], ast.Name) and call.args[0].id not in namespace:
            done.append(f"super({call.args[0].id}, ...) in {name} read as super()")
            call.args, call.keywords = [], []
    return done


def move_nested_methods(name, node, cls, namespace, assigned):
    """Functions defined inside ``__init__`` and never used there (``def forward`` indented one level too deep)
    become methods of the class."""
    init = method_of(node, "__init__")
    if init is None:
        return []
    used = {n.id for statement in init.body if not isinstance(statement, FUNCTIONS)
            for n in ast.walk(statement) if isinstance(n, ast.Name)}
    nested = [s for s in init.body if isinstance(s, FUNCTIONS) and s.name not in used
              and method_of(node, s.name) is None and s.args.args and s.args.args[0].arg == "self"]
    for function in nested:
        init.body.remove(function)
        node.body.append(function)
    if init.body == []:
        init.body.append(ast.copy_location(ast.Pass(), init))
    return [f"{f.name} moved out of {name}.__init__ into the class body" for f in nested]


def torch_module_named(attribute):
    """The name of the ``torch.nn`` module class an attribute's name spells (``dropout``: ``Dropout``), or None."""
    wanted = attribute.replace("_", "").lower()
    return next((n for n, c in vars(nn).items() if n.lower() == wanted and inspect.isclass(c)
                 and issubclass(c, nn.Module)), None)


class ReadAs(ast.NodeTransformer):
    """Replaces the reads of ``self.<attribute>``: by ``self.<name>``, or by a torch.nn class following the block's
    training mode: ``self.dropout(0.1)`` (built where it is used) as ``nn.Dropout(0.1).train(self.training)``,
    ``self.dropout(x)`` (applied as a module) as ``nn.Dropout().train(self.training)(x)``."""

    def __init__(self, attribute, name=None, torch_class=None):
        self.attribute, self.name, self.torch_class = attribute, name, torch_class

    def reads(self, node):
        return isinstance(node, ast.Attribute) and node.attr == self.attribute and isinstance(node.ctx, ast.Load) \
            and isinstance(node.value, ast.Name) and node.value.id == "self"

    def visit_Call(self, node):
        if not (self.torch_class and self.reads(node.func)):
            return self.generic_visit(node)
        node = self.generic_visit(node)
        if node.args and isinstance(node.args[0], ast.Constant):
            return self.following_training_mode(node)
        node.func = self.following_training_mode(ast.Call(node.func, [], []))
        return node

    def visit_Attribute(self, node):
        if not self.reads(node):
            return self.generic_visit(node)
        if self.torch_class:
            return ast.copy_location(ast.parse(f"__import__('torch').nn.{self.torch_class}", mode="eval").body, node)
        node.attr = self.name
        return node

    @staticmethod
    def following_training_mode(built):
        training = ast.parse("self.training", mode="eval").body
        return ast.Call(ast.Attribute(built, "train", ast.Load()), [training], [])


def read_unassigned_attributes(name, node, cls, namespace, assigned):
    """``self.x`` read but assigned nowhere is read as the closest name the class assigns (``self.embed_size`` as
    ``self.embed_dim``), else as the torch.nn module its name spells (``self.dropout`` as ``nn.Dropout``)."""
    own = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
           and isinstance(n.value, ast.Name) and n.value.id == "self"}
    done = []
    for unassigned in [attribute.attr for attribute, _ in attributes_never_assigned(cls, node, assigned)]:
        match = difflib.get_close_matches(unassigned, sorted(own), n=1, cutoff=0.6)
        torch_class = None if match else torch_module_named(unassigned)
        if match:
            done.append(f"self.{unassigned} in {name} read as self.{match[0]}, the closest attribute it assigns")
        elif torch_class:
            done.append(f"self.{unassigned} in {name}, never assigned, read as torch.nn.{torch_class}")
        else:
            continue
        ReadAs(unassigned, match[0] if match else None, torch_class).visit(node)
    return done


def read_undefined_names(name, node, cls, namespace, assigned):
    """A name defined nowhere, read in a method that binds a close one (``slf_attn_mask`` where the parameter is
    ``self_attn_mask``), is read as that name."""
    done = []
    for method in (m for m in node.body if isinstance(m, FUNCTIONS)):
        for unknown, close in [(n.id, close) for n, close in undefined_names(method, namespace) if close]:
            for n in ast.walk(method):
                if isinstance(n, ast.Name) and n.id == unknown:
                    n.id = close
            done.append(f"{unknown} in {name}.{method.name}, defined nowhere, read as {close}")
    return done


REPAIRS = (drop_unknown_super_class, insert_super_init, move_nested_methods, read_unassigned_attributes,
           read_undefined_names)


def top_level_definitions(trees):
    """``[(filename, ClassDef or FunctionDef)]`` at the top of the cells, in the order they ran, the last of each
    name only (a notebook may define one again)."""
    found = {}
    for filename, tree in trees:
        for node in tree.body:
            if isinstance(node, (ast.ClassDef,) + FUNCTIONS):
                found.pop(node.name, None)
                found[node.name] = (filename, node)
    return list(found.values())


def repaired_namespace(trees, namespace):
    """``(copy of namespace, [Repair])``: the submission's module classes with every repair applied, and its other
    classes and functions defined again beside them (so that they build and call the repaired ones); ``({}, [])``
    when nothing needs repairing."""
    assigned = assigned_names(trees)
    new, repairs, redo = dict(namespace), [], []
    for filename, node in top_level_definitions(trees):
        current = namespace.get(node.name)
        if getattr(getattr(current, "__code__", None), "co_filename", None) == filename:
            redo.append((filename, node))  # a function of the submission's
        elif inspect.isclass(current) and issubclass(current, nn.Module) and current.__module__ == namespace.get(
                "__name__"):
            node = copy.deepcopy(node)
            done = [d for repair in REPAIRS for d in repair(node.name, node, current, namespace, assigned)]
            redo.append((filename, node))
            repairs += [Repair(node.name, d, (filename, node.lineno)) for d in done]
    if not repairs:
        return {}, []
    for filename, node in redo:
        try:
            exec(compile(ast.fix_missing_locations(ast.Module([node], [])), filename, "exec"), new)
        except Exception:  # the definition itself fails (a decorator, a base): left as it was
            new[node.name] = namespace[node.name]
    return new, repairs
