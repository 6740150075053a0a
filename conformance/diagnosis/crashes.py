"""Diagnosis of crashes: an exception raised by the implementation's code, read for the common mistakes behind it
(``super().__init__()`` missing, a name that does not exist, arguments in the wrong order, a ``forward`` defined at
the wrong indentation, a call that unpacks the wrong number of results, None used as a tensor) so that the report
names the cause."""
import linecache
import re
import traceback
from dataclasses import dataclass


@dataclass
class Crash:
    cause: str
    """A stable identifier: ``error.super_init_missing``, ``error.undefined_name``, ..."""
    explanation: str
    where: str
    """``file:line in Class.method``: the innermost frame in the implementation's code."""


def own_frame(tb, is_checker_code):
    """The innermost frame of the traceback outside the checker and the libraries (else the innermost one)."""
    frames = [frame for frame, _ in traceback.walk_tb(tb)]
    lines = [line for _, line in traceback.walk_tb(tb)]
    own = [i for i, f in enumerate(frames) if not is_checker_code(f.f_code.co_filename)]
    i = own[-1] if own else len(frames) - 1
    return (frames[i], lines[i]) if frames else (None, None)


def raised_by_the_checker(tb, checker_dirs, library_dirs):
    """The frame of the checker's own code (under ``checker_dirs``) an exception came from, directly or through
    library code (under ``library_dirs``) that called no module's forward (``inspect``'s binding of a call, torch's
    tensor functions), or None: an exception raised inside a module called from the checker may be that module's."""
    for frame, _ in reversed(list(traceback.walk_tb(tb))):
        filename = frame.f_code.co_filename
        if filename.startswith(checker_dirs):
            return frame
        if not filename.startswith(library_dirs) or frame.f_code.co_name in ("_call_impl", "_wrapped_call_impl"):
            return None
    return None


def owner_class(frame):
    """The class of ``self`` in ``frame`` (a method's frame), else None."""
    instance = frame.f_locals.get("self") if frame is not None else None
    return type(instance) if instance is not None else None


def class_without_forward(tb):
    """The class of a torch module, found in the traceback's frames, that does not define ``forward``."""
    import torch.nn as nn
    for frame, _ in reversed(list(traceback.walk_tb(tb))):
        for value in frame.f_locals.values():
            if isinstance(value, nn.Module) and type(value).forward is nn.Module.forward:
                return type(value)
    return None


def class_location(cls, locate):
    """``file:line in class X`` of a class's definition, else None: the ``class`` line above its first method (the
    file of its code, which for a notebook is its cell; ``inspect`` would search the module's file instead)."""
    code = first_code(cls) if cls is not None else None
    if code is None:
        return None
    lines = linecache.getlines(code.co_filename)
    line = next((n for n in range(min(code.co_firstlineno, len(lines)), 0, -1)
                 if re.match(rf"\s*class\s+{cls.__name__}\b", lines[n - 1])), code.co_firstlineno)
    return f"{(locate(code.co_filename, line) if locate else None) or f'{code.co_filename}:{line}'} in class " \
           f"{cls.__name__}"


def first_code(target):
    """The code object of a function, or the first in the source of a class's own methods; else None."""
    if isinstance(target, type):
        codes = [f.__code__ for f in vars(target).values() if hasattr(f, "__code__")]
        return min(codes, key=lambda c: c.co_firstlineno, default=None)
    return getattr(getattr(target, "__func__", target), "__code__", None)


def nested_forward(cls):
    """The code of a function named ``forward`` defined inside ``cls.__init__`` (an indentation mistake), else
    None."""
    code = getattr(getattr(cls, "__init__", None), "__code__", None)
    return next((c for c in getattr(code, "co_consts", ()) if getattr(c, "co_name", "") == "forward"), None)


def diagnose(exc, tb, is_checker_code, locate=None):
    """A :class:`Crash` naming the likely mistake behind ``exc``."""
    frame, line = own_frame(tb, is_checker_code)
    name = frame.f_code.co_qualname if frame is not None else "?"
    filename = frame.f_code.co_filename if frame is not None else "?"
    where = f"{(locate(filename, line) if locate else None) or f'{filename}:{line}'} in {name}"
    text = str(exc)
    cls = owner_class(frame)
    cls_name = cls.__name__ if cls else name.split(".")[0]
    if isinstance(exc, AttributeError) and ("before Module.__init__() call" in text or
                                            re.search(r"has no attribute '_(modules|parameters|buffers)'", text)):
        return Crash("error.super_init_missing", f"`super().__init__()` missing in {cls_name}.__init__: torch.nn.Module "
                     "must be initialised before sub-modules or parameters are assigned", where)
    match = re.fullmatch(r"'(\w+)' object has no attribute '(\w+)'", text)
    if isinstance(exc, AttributeError) and match and cls is not None and cls.__name__ == match[1]:
        return Crash("error.attribute_never_assigned", f"{name} uses self.{match[2]}, which {match[1]}.__init__ never "
                     f"assigns (a line missing or misspelled in __init__)", where)
    if isinstance(exc, (AttributeError, TypeError)) and "'NoneType'" in text:
        return Crash("error.none_used_as_tensor", f"{text}: None was used where a tensor is expected in {name} (a "
                     "forward or function with no return statement before it?)", where)
    if isinstance(exc, NameError):
        missing = getattr(exc, "name", None) or text
        source = linecache.getline(filename, line or 0)
        if re.search(rf"super\(\s*{re.escape(str(missing))}\s*,", source):
            return Crash("error.super_names_wrong_class", f"super({missing}, self) in {name} names a class that does not "
                         f"exist (renamed?): write super().__init__()", where)
        return Crash("error.undefined_name", f"the name {missing!r} is not defined where {name} uses it "
                     "(misspelled, defined later, or defined in a cell that failed)", where)
    if 'missing the required "forward" function' in text or text.startswith("_forward_unimplemented()"):
        module_cls = class_without_forward(tb)
        nested = nested_forward(module_cls) if module_cls is not None else None
        if nested is not None:
            at = locate(nested.co_filename, nested.co_firstlineno) if locate else None
            where = f"{at or f'{nested.co_filename}:{nested.co_firstlineno}'} in {module_cls.__name__}.__init__"
            return Crash("error.forward_nested_in_init", f"{module_cls.__name__}.forward is defined inside __init__ "
                         "(indented one level too deep), so the class has no forward method", where)
        where = class_location(module_cls, locate) or where
        named = module_cls.__name__ if module_cls is not None else "a module"
        return Crash("error.forward_missing", f"{named} defines no forward method ({text})", where)
    if isinstance(exc, TypeError) and re.search(r"'(float|int)' object is not callable|cannot assign '(float|int)' as "
                                                r"child module", text):
        return Crash("error.arguments_in_wrong_order", f"a number was called as a module in {name}: arguments passed "
                     "in the wrong order (a dropout rate where a module is expected?)", where)
    if isinstance(exc, TypeError) and re.search(r"not supported between instances of '\w+' and '(float|int)'", text):
        return Crash("error.arguments_in_wrong_order", f"a module was compared with a number in {name}: arguments "
                     "passed in the wrong order (a module where a dropout rate is expected?)", where)
    if isinstance(exc, TypeError) and re.search(r"(missing \d+ required positional argument|takes \d+ positional "
                                                r"arguments? but \d+ (was|were) given|unexpected keyword argument)",
                                                text):
        return Crash("error.call_signature_mismatch", f"{text}: a call does not match the signature it calls", where)
    if isinstance(exc, ValueError) and re.search(r"(too many|not enough) values to unpack", text):
        return Crash("error.unpacking_mismatch", f"{text}: a call returns a different number of values than its caller "
                     "unpacks (for example attention returning one tensor where two are unpacked)", where)
    if isinstance(exc, RuntimeError) and "view size is not compatible with input tensor's size and stride" in text:
        return Crash("error.view_of_non_contiguous", f"{text}: view() of a tensor that is not contiguous (transposed): "
                     "write .contiguous().view(...) or .reshape(...)", where)
    if isinstance(exc, RuntimeError) and re.search(r"(shapes cannot be multiplied|size of tensor a|expanded size|"
                                                   r"shape '\[.*\]' is invalid|must match the size|"
                                                   r"Expected size for first two dimensions)", text):
        return Crash("error.shape_mismatch", f"{text}: tensors of incompatible shapes (a dimension mixed up?)", where)
    return Crash(f"error.{type(exc).__name__}", f"{type(exc).__name__}: {text}", where)
