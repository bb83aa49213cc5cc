// Launching a generated kernel: the geometry and the packed arguments come
// from the kernel's own description (kernels/ptx/params.h), so the launcher
// cannot disagree with the generator about block size, shared memory or the
// parameter list.
#pragma once

#include "engine/cuda/module.h"
#include "kernels/ptx/params.h"

namespace ptxlm::cuda {

inline LaunchDims launch_dims(const ptx::LaunchGeometry& g) {
    return LaunchDims{{g.grid.x, g.grid.y, g.grid.z}, {g.block.x, g.block.y, g.block.z}, g.shared_bytes};
}

// Launches `f` with the geometry its generator chose and arguments packed
// from its ParamList (ParamList::pack checked count and types already).
inline void launch(const Function& f, const ptx::LaunchGeometry& g, const Stream& s, ptx::ParamPack& args) {
    f.reserve_dynamic_shared(g.shared_bytes);   // opts in only above 48 KiB
    launch(f, launch_dims(g), s, args.args());
}

// The same as a programmatic dependent launch (module.h).
inline void launch_programmatic(const Function& f, const ptx::LaunchGeometry& g, const Stream& s,
                                ptx::ParamPack& args) {
    f.reserve_dynamic_shared(g.shared_bytes);
    launch_programmatic(f, launch_dims(g), s, args.args());
}

}  // namespace ptxlm::cuda
