"""Fixed costs of hypothesis the plugin keeps down, before anything imports it (``conformance.plugin`` imports this
module first): pytest's rewriting of its modules, and the cleaning of each check's source for its digest."""
import functools
import sys


def imports_left_unrewritten():
    """Keep pytest from rewriting the asserts of installed pytest plugins (hypothesis, pytest-xdist, this project's
    own packages and whatever else registers one): pytest marks every top-level package of each distribution that
    registers a plugin, and where bytecode is not cached (``PYTHONDONTWRITEBYTECODE``) parses and compiles each
    module again at every start, about 0.6 s for hypothesis alone and as much for the checker's adapters. Their
    asserts are their own, never a check's (the checks raise their findings, and assert nothing)."""
    from importlib.metadata import entry_points
    packages = {"hypothesis"}
    for plugin in entry_points(group="pytest11"):
        packages.add(plugin.value.split(":")[0].split(".")[0])
        packages.update((plugin.dist.read_text("top_level.txt") or "").split() if plugin.dist else ())
    for hook in sys.meta_path:
        marked = getattr(hook, "_must_rewrite", None)
        if isinstance(marked, set) and marked & packages:
            marked.difference_update(packages)
            getattr(hook, "_marked_for_rewrite_cache", {}).clear()


imports_left_unrewritten()
import hypothesis.internal.reflection as reflection  # noqa: E402  (once pytest no longer rewrites it)

if callable(getattr(reflection, "_clean_source", None)):
    # the costliest part of hypothesis's digest of a check (the seed of its examples), a function of the check's
    # source alone and so the same for each of its parametrized items: done once a check rather than once an item
    reflection._clean_source = functools.lru_cache(reflection._clean_source)
