"""pstrain/_core.pyi, the extension's type stub, names what the bindings define: the same classes
and functions, the same methods and properties of each class, the same parameters in the same
order. A binding added, removed or renamed without its stub fails here (mypy's stubtest checks more,
where mypy is installed)."""

import ast
import os
import re
import unittest

import pstrain._core as core

STUB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pstrain", "_core.pyi")


def stub_tree():
    with open(STUB) as f:
        return ast.parse(f.read())


def stub_params(function):
    """The parameter names of a stub function, without self."""
    names = [a.arg for a in function.args.posonlyargs + function.args.args + function.args.kwonlyargs]
    return names[1:] if names[:1] == ["self"] else names


def runtime_params(function):
    """The parameter names in a pybind11 function's signature line ("f(self: T, a: int = 1) -> R")."""
    signature = function.__doc__.splitlines()[0]
    inside = re.match(r"^\w+\((.*)\) -> ", signature).group(1)
    params, depth, quote, current = [], 0, None, ""
    for c in inside:
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "[(":
            depth += 1
        elif c in "])":
            depth -= 1
        elif c == "," and depth == 0:
            params.append(current)
            current = ""
            continue
        current += c
    if current.strip():
        params.append(current)
    names = [p.split(":")[0].strip() for p in params]
    return names[1:] if names[:1] == ["self"] else names


def is_property(function):
    return any(isinstance(d, ast.Name) and d.id == "property" for d in function.decorator_list)


class CoreStubTest(unittest.TestCase):
    def test_stub_has_the_modules_classes_and_functions(self):
        stubbed = {n.name for n in stub_tree().body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
        runtime = {name for name in vars(core) if not name.startswith("_")}
        self.assertEqual(stubbed, runtime)

    def test_stub_functions_take_the_bindings_parameters(self):
        for node in stub_tree().body:
            if isinstance(node, ast.FunctionDef):
                with self.subTest(function=node.name):
                    self.assertEqual(stub_params(node), runtime_params(getattr(core, node.name)))

    def test_stub_classes_have_the_bindings_methods_and_properties(self):
        for node in stub_tree().body:
            if not isinstance(node, ast.ClassDef):
                continue
            cls = getattr(core, node.name)
            if issubclass(cls, Exception):
                with self.subTest(error=node.name):
                    bases = [b.id for b in node.bases]
                    self.assertEqual([b.__name__ for b in cls.__bases__], bases)
                continue
            functions = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef) and f.name != "__init__"}
            runtime = {name: value for name, value in vars(cls).items() if not name.startswith("_")}
            with self.subTest(cls=node.name):
                self.assertEqual(sorted(functions), sorted(runtime))
            for name, function in functions.items():
                with self.subTest(cls=node.name, member=name):
                    value = runtime.get(name)
                    if is_property(function):
                        self.assertIsInstance(value, property)
                    else:
                        self.assertNotIsInstance(value, property)
                        self.assertEqual(stub_params(function), runtime_params(getattr(cls, name)))
            init = [f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"]
            if init:
                with self.subTest(cls=node.name, member="__init__"):
                    self.assertEqual(stub_params(init[0]), runtime_params(cls.__init__))


if __name__ == "__main__":
    unittest.main()
