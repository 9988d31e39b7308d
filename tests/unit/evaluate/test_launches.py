"""Tests for the launch hook's argument walk (issue 13 item 8): tensors inside tuples, TMA tensor
descriptors and Triton's tensor wrappers are kernel arguments for provenance, and every launch
path (JITFunction, the interpreter, ahead-of-time CompiledKernel) is hooked."""

from __future__ import annotations

import torch

from tritongym.evaluator.worker.launches import LaunchRecorder, launch_tensors


def test_tensors_are_found_in_tuples_descriptors_and_wrappers():
    from triton.runtime.jit import TensorWrapper
    from triton.tools.tensor_descriptor import TensorDescriptor

    a, b, c, d = (torch.zeros(16) for _ in range(4))
    descriptor = TensorDescriptor(b.view(4, 4), shape=[4, 4], strides=[4, 1], block_shape=[2, 2])
    wrapped = TensorWrapper(c, torch.float32)
    found = launch_tensors([a, (descriptor, 3), [wrapped, (d,)], "x", 2.0, None])
    assert [t.data_ptr() for t in found] == [a.data_ptr(), b.data_ptr(), c.data_ptr(), d.data_ptr()]


def test_objects_that_merely_have_a_base_attribute_are_not_tensors():
    class Fake:
        base = torch.zeros(2)

    assert launch_tensors([Fake()]) == []


def test_every_launch_path_is_hooked():
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime import jit
    from triton.runtime.interpreter import InterpretedFunction

    originals = (jit.JITFunction.run, InterpretedFunction.run, CompiledKernel.__getitem__)
    recorder = LaunchRecorder()
    try:
        recorder.install()
        assert recorder.installed == ["triton.runtime.jit.JITFunction.run",
                                      "triton.runtime.interpreter.InterpretedFunction.run",
                                      "triton.compiler.compiler.CompiledKernel.__getitem__"]
        assert jit.JITFunction.run.__wrapped__ is originals[0]
        assert InterpretedFunction.run.__wrapped__ is originals[1]
        assert CompiledKernel.__getitem__.__wrapped__ is originals[2]
    finally:
        jit.JITFunction.run, InterpretedFunction.run, CompiledKernel.__getitem__ = originals
