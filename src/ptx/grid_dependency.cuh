// Programmatic dependent launch (PTX ISA "griddepcontrol"; CUDA programming guide, "Programmatic
// Dependent Launch"): a kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization
// may start before the kernel ahead of it in the stream has finished, so that its launch and
// prologue overlap that kernel's tail.
#pragma once

namespace hopattn::ptx {

// Blocks until every grid this one depends on has completed and its memory operations are
// visible. A no-op in a kernel launched without the attribute, so a kernel that may read a
// preceding kernel's output calls it before that read whatever its launch.
__device__ __forceinline__ void wait_for_prior_grids() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

// Lets the dependent grid launch once every CTA of this one has called it (or exited); it waits
// in wait_for_prior_grids() for this grid's completion, so calling this early costs no ordering.
__device__ __forceinline__ void allow_dependent_launch() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// The start of a kernel launched as a programmatic dependent that also has one behind it (or
// may): waits for the grids before it, then lets the next launch start at once.
__device__ __forceinline__ void begin_dependent_grid() {
  wait_for_prior_grids();
  allow_dependent_launch();
}

}  // namespace hopattn::ptx
