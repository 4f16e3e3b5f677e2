"""One schema per family, from which everything torch sees of it derives.

A :class:`Family` is declared by its name, its arguments in torch's schema syntax, its outputs'
names and shapes, and the C++ call. From these it registers

- ``hopattn::<name>``: the functional op (returns the outputs),
- ``hopattn::<name>_out``: the same arguments (no defaults) then the outputs, written in place,
- a fake (meta) implementation of each, so ``torch.compile(fullgraph=True)`` traces them,
- with ``autograd=(setup_context, backward)``: the op's autograd formula,

and routes each call (:meth:`Family.call`, :meth:`Family.call_out`) one of three ways:

- plain eager (:func:`hopattn._torch._compat.plain_context`: nothing would intercept the
  dispatch; every tensor a plain ``torch.Tensor`` or ``nn.Parameter`` on CPU or CUDA; no
  autograd to record): the implementation is called directly. The dispatcher would only forward
  the call there, at tens of microseconds for ops with this many arguments.
- the same, but with inputs that require grad: a ``torch.autograd.Function`` built from the same
  setup_context and backward as the op's autograd formula (the formula as registered spends about
  75 us a call in ``torch.library``'s ``fill_defaults`` alone for attention_fwd's 19 arguments,
  development CPU, torch 2.15).
- anything else (torch.compile, fake or functional tensors, modes, functorch, subclasses): the op.

Arguments arrive flat and normalized (``hopattn._args``), in schema order; tensors cross to C++
as DLPack capsules from torch's C exporter, one per C++ call (a capsule is consumed once).
"""

import ast
import operator

import torch
from torch import Tensor
from torch.utils.dlpack import to_dlpack

from hopattn._torch import _compat

_Parameter = torch.nn.Parameter
_F32 = torch.float32
PLAIN, GRAD, OP = "plain", "grad", "op"


def _picker(indices):
    """args -> tuple of args[i] for i in indices (operator.itemgetter, always a tuple)."""
    if not indices:
        return lambda args: ()
    if len(indices) == 1:
        (i,) = indices
        return lambda args: (args[i],)
    return operator.itemgetter(*indices)


_REQUIRED = object()


def _parse(schema):
    """[(type, name, default value or _REQUIRED)] of "Tensor q, Tensor? sinks=None, ...";
    defaults are Python literals (None, True, -1, 0.0, 'NHD')."""
    args = []
    for item in schema.split(","):
        decl, eq, default = item.partition("=")
        decl = decl.split()
        if len(decl) != 2:
            raise ValueError(f"schema argument {item.strip()!r}: expected 'type name[=default]'")
        args.append((decl[0], decl[1], ast.literal_eval(default.strip()) if eq else _REQUIRED))
    return args


class Family:
    """A family's ops, fakes, autograd and call routing, from one declaration.

    - ``name``: the op is ``torch.ops.hopattn.<name>``, the out variant ``<name>_out``.
    - ``schema``: the arguments in torch's schema syntax, in the order the backend passes them
      (tensors first; options with the defaults of the flat form).
    - ``outputs``: output names; a trailing "?" marks one that a call may not produce (the out
      variant takes None, the functional op returns an empty float32 tensor in its place, which
      ``run`` does not pass on).
    - ``shapes(*args)``: per output, (reference tensor, shape, dtype or None for the reference's),
      or None for an optional output this call does not produce. The outputs are allocated on the
      reference's device (the implementation and the fake share this).
    - ``run(family, args, outs)``: the C++ call, writing the outputs.
    - ``autograd``: (setup_context(ctx, inputs, output), backward(ctx, *grads)), torch.library's
      signatures, or None.
    """

    def __init__(self, name, schema, outputs, shapes, run, autograd=None):
        self.name = name
        self.args = _parse(schema)
        self.names = tuple(n for _, n, _ in self.args)
        self._defaults = tuple(d for _, _, d in self.args)
        self.outputs = tuple(o.rstrip("?") for o in outputs)
        self._optional = tuple(o.endswith("?") for o in outputs)
        self.shapes = shapes
        self._run = run
        tensors = [i for i, (t, _, _) in enumerate(self.args) if t.startswith("Tensor")]
        scalars = [i for i in range(len(self.args)) if i not in tensors]
        self._tensor_pos, self._scalar_pos = tuple(tensors), tuple(scalars)
        self._tensors = _picker(tensors)
        self._tensor_names = tuple(self.names[i] for i in tensors)
        self._scalars = _picker(scalars)
        self._scalar_names = tuple(self.names[i] for i in scalars)
        self._paged = "page_indptr" in self.names

        returns = ", ".join("Tensor" for _ in outputs)
        aliases = "abcdefghijklmnopqrstuvwxyz"
        out_args = ", ".join(
            f"Tensor({aliases[i]}!){'?' if opt else ''} {o}"
            for i, (o, opt) in enumerate(zip(self.outputs, self._optional))
        )
        self.schema = f"({schema.strip()}) -> ({returns})"
        # Without defaults: custom ops take no keyword-only tensors, and positional outputs cannot
        # follow defaulted arguments.
        plain = ", ".join(f"{t} {n}" for t, n, _ in self.args)
        self.out_schema = f"({plain}, {out_args}) -> ()"

        self.op_def = torch.library.custom_op(
            f"hopattn::{name}", self.impl, mutates_args=(), schema=self.schema
        )
        self.op_def.register_fake(self.allocate_all)
        self.out_op_def = torch.library.custom_op(
            f"hopattn::{name}_out",
            self._impl_out,
            mutates_args=self.outputs,
            schema=self.out_schema,
        )
        self.out_op_def.register_fake(_no_outputs)
        self.op = getattr(torch.ops.hopattn, name).default
        self.out_op = getattr(torch.ops.hopattn, f"{name}_out").default

        self._function = None
        if autograd is not None:
            setup_context, backward = autograd
            torch.library.register_autograd(
                f"hopattn::{name}", backward, setup_context=setup_context
            )
            self._function = _eager_function(name, self.impl, setup_context, backward)

    # ------------------------------------------------------------------ arguments
    def flat(self, tensors, options):
        """The flat argument tuple: the leading `tensors`, then the rest of the schema's
        arguments from the dict `options` (hopattn._args' normalized keywords) by name."""
        # A list comprehension (not operator.itemgetter): Dynamo traces this.
        return (*tensors, *[options[name] for name in self.names[len(tensors) :]])

    def split(self, args):
        """(tensor arguments, other arguments), each in schema order (for saving in autograd)."""
        return self._tensors(args), self._scalars(args)

    def join(self, tensors, scalars):
        """The argument tuple back from :meth:`split`'s halves."""
        args = [None] * len(self.names)
        for i, t in zip(self._tensor_pos, tensors):
            args[i] = t
        for i, x in zip(self._scalar_pos, scalars):
            args[i] = x
        return tuple(args)

    # ------------------------------------------------------------------ implementation
    def allocate(self, args, given):
        """The outputs: `given` ones as they are, the others allocated (optional ones that the
        call does not produce: None)."""
        outs = []
        for spec, out in zip(self.shapes(*args), given):
            if out is None and spec is not None:
                ref, shape, dtype = spec
                out = ref.new_empty(shape, dtype=dtype)
            outs.append(out)
        return tuple(outs)

    def _complete(self, args):
        # The dispatcher leaves out trailing arguments equal to their defaults.
        n = len(args)
        return args if n == len(self._defaults) else (*args, *self._defaults[n:])

    def allocate_all(self, *args):
        """The functional op's outputs (also its fake): an optional output that the call does not
        produce is an empty float32 tensor (ops cannot return None)."""
        if len(args) != len(self._defaults):
            args = self._complete(args)
        outs = []
        for spec in self.shapes(*args):
            if spec is None:
                outs.append(args[0].new_empty(0, dtype=_F32))
            else:
                ref, shape, dtype = spec
                outs.append(ref.new_empty(shape, dtype=dtype))
        return tuple(outs)

    def impl(self, *args):
        if len(args) != len(self._defaults):
            args = self._complete(args)
        outs = self.allocate_all(*args)
        self._run(self, args, outs)
        return outs

    def _impl_out(self, *args_and_outs):
        n = len(self.names)
        self._run(self, args_and_outs[:n], args_and_outs[n:])

    def kwargs(self, args, outs):
        """The C++ call's keyword arguments: every argument and output by name, tensors as DLPack
        capsules, absent tensors left out (the bindings default them to None); a page table given
        as (page_indptr, page_indices) becomes the pair the binding takes as ``page_table``."""
        kw = dict(zip(self._scalar_names, self._scalars(args)))
        for name, t in zip(self._tensor_names, self._tensors(args)):
            if t is not None:
                kw[name] = to_dlpack(t)
        for name, t in zip(self.outputs, outs):
            if t is not None:
                kw[name] = to_dlpack(t)
        if self._paged:
            indptr, indices = kw.pop("page_indptr", None), kw.pop("page_indices", None)
            if indptr is not None or indices is not None:
                kw["page_table"] = (indptr, indices)
            else:
                kw["page_table"] = kw.get("page_table")  # the binding names a missing one
        return kw

    # ------------------------------------------------------------------ routing
    def route(self, args, outs=()):
        """PLAIN, GRAD (plain, but a tensor requires grad while grad mode is on) or OP (see the
        module docstring)."""
        if not _compat.plain_context():
            return OP
        grad = torch.is_grad_enabled()
        needs_grad = False
        for t in (*self._tensors(args), *outs):
            if t is None:
                continue
            kind = type(t)
            if (kind is not Tensor and kind is not _Parameter) or not (t.is_cuda or t.is_cpu):
                return OP
            if grad and t.requires_grad:
                needs_grad = True
        return GRAD if needs_grad else PLAIN

    def call(self, args):
        """The functional op on flat `args`: its outputs."""
        route = self.route(args)
        if route is PLAIN:
            return self.impl(*args)
        if route is GRAD and self._function is not None:
            return self._function.apply(*args)
        return self.op(*args)

    def call_out(self, args, outs):
        """The out variant: `outs` given (None: allocated here); returns the outputs."""
        route = self.route(args, outs)
        if route is GRAD or (route is OP and self._requires_grad(args, outs)):
            raise RuntimeError(
                f"hopattn.{self.name}: out= buffers do not support automatic differentiation; "
                "call it without out= (or under torch.no_grad())"
            )
        outs = self.allocate(args, outs)
        if route is PLAIN:
            self._run(self, args, outs)
            # What the op's dispatch does for the arguments it mutates.
            torch.autograd.graph.increment_version([o for o in outs if o is not None])
        else:
            self.out_op(*args, *outs)
        return outs

    def _requires_grad(self, args, outs):
        if not torch.is_grad_enabled():
            return False
        tensors = [args[i] for i in self._tensor_pos] + list(outs)
        return any(t is not None and t.requires_grad for t in tensors)


def _no_outputs(*args):
    return None


def stream(t):
    """The raw current stream of t's device (0 for CPU tensors)."""
    return _compat.current_raw_stream(t.get_device()) if t.is_cuda else 0


def run_on_stream(c_function):
    """A Family `run` for a C++ call that takes nothing but the arguments and outputs by name and
    the first argument's stream (attention_fwd, merge_states, merge_states_n)."""

    def run(family, args, outs):
        c_function(**family.kwargs(args, outs), stream=stream(args[0]))

    return run


def run_with_workspace(c_function, workspaces):
    """A Family `run` for a C++ call that takes a workspace from `workspaces` (a
    workspace.WorkspaceCache) on the first argument's stream: the call returns 0 when it ran,
    else the bytes it needs (having run nothing)."""

    def run(family, args, outs):
        first = args[0]
        s = stream(first)

        def call(workspace):
            return c_function(
                **family.kwargs(args, outs),
                workspace=None if workspace is None else to_dlpack(workspace),
                stream=s,
            )

        workspaces.run(call, first, s)

    return run


def _eager_function(name, impl, setup_context, backward):
    """A torch.autograd.Function running `impl` with the op's setup_context and backward, for
    eager calls whose inputs require grad (old-style forward(ctx, ...): the setup_context form
    binds the arguments through inspect.signature on every call)."""

    def forward(ctx, *args):
        outs = impl(*args)
        setup_context(ctx, args, outs)
        return outs

    return type(
        f"{name}_function",
        (torch.autograd.Function,),
        {"forward": staticmethod(forward), "backward": staticmethod(backward)},
    )
