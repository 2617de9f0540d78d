"""Strategic merge patch (application/strategic-merge-patch+json) as the API server applies it to the built-in
kinds of kube_schema.py, for the patches `kubectl apply` computes (three-way, client side). Standard library only.

Supported: maps merged key by key (null deletes); lists with a merge key merged element by element
(`$patch: delete` on an element removes it, `$patch: replace` in the list replaces it), primitive lists with
patchStrategy merge merged as sets, atomic lists replaced; the directives `$patch` (replace, delete, merge) on
maps, `$retainKeys`, `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>`. Where the schema says
nothing (a free-form field), a patch merges as a JSON merge patch (RFC 7386) does.
"""

import copy

from kube_schema import ANY, List, Map, resolve


class PatchError(Exception):
    pass


def strategic_merge(original, patch, t):
    """`original` with `patch` applied, `t` the type of both (a kube_schema type spec)."""
    t = resolve(t)
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(original, dict):
        original = {}
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive not in (None, "merge"):
        raise PatchError("unknown patch directive %r" % directive)
    out = copy.deepcopy(original)
    fields = t if isinstance(t, dict) else None
    value_type = t.value if isinstance(t, Map) else ANY
    orders = {}
    for k, v in patch.items():
        if k == "$patch":
            continue
        if k == "$retainKeys":
            continue
        if k.startswith("$setElementOrder/"):
            orders[k[len("$setElementOrder/"):]] = v
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            name = k[len("$deleteFromPrimitiveList/"):]
            if isinstance(out.get(name), list):
                out[name] = [x for x in out[name] if x not in v]
            continue
        if v is None:
            out.pop(k, None)
            continue
        ft = fields.get(k, ANY) if fields is not None else value_type
        ft = resolve(ft)
        if isinstance(ft, List):
            out[k] = merge_list(out.get(k), v, ft)
        elif isinstance(v, dict):
            merged = strategic_merge(out.get(k), v, ft)
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        else:
            out[k] = copy.deepcopy(v)
    if "$retainKeys" in patch:
        keep = set(patch["$retainKeys"] or [])
        out = {k: v for k, v in out.items() if k in keep}
    for name, order in orders.items():
        ft = resolve(fields.get(name, ANY)) if fields is not None else ANY
        if isinstance(out.get(name), list):
            out[name] = reorder(out[name], order, ft.key if isinstance(ft, List) else None)
    return out


def merge_list(original, patch, t):
    if not isinstance(patch, list):
        raise PatchError("a list field was patched with %s" % type(patch).__name__)
    original = copy.deepcopy(original) if isinstance(original, list) else []
    if any(isinstance(e, dict) and e.get("$patch") == "replace" for e in patch):
        return [copy.deepcopy(e) for e in patch if not (isinstance(e, dict) and e.get("$patch") == "replace")]
    if t.key is None:
        if t.merge:
            return original + [copy.deepcopy(e) for e in patch if e not in original]
        return copy.deepcopy(patch)  # atomic: replaced
    out = original
    for e in patch:
        if not isinstance(e, dict) or t.key not in e:
            raise PatchError("a list element without its merge key %r" % t.key)
        at = next((i for i, o in enumerate(out) if isinstance(o, dict) and o.get(t.key) == e[t.key]), None)
        if e.get("$patch") == "delete":
            if at is not None:
                del out[at]
            continue
        if at is None:
            out.append(strategic_merge({}, e, t.item))
        else:
            out[at] = strategic_merge(out[at], e, t.item)
    return out


def reorder(items, order, key):
    """items sorted as `order` says ($setElementOrder); items it does not name keep their place after them."""
    def ident(x):
        return x.get(key) if key is not None and isinstance(x, dict) else x
    wanted = [o.get(key) if key is not None and isinstance(o, dict) else o for o in order]
    named = [x for w in wanted for x in items if ident(x) == w]
    rest = [x for x in items if ident(x) not in wanted]
    return named + rest
