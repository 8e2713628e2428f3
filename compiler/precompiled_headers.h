// Precompiled header of tessel_compiler (compiler/CMakeLists.txt, option TESSEL_PCH): the standard
// library, isl's C++ interface and the IR headers that most of its files include, directly or
// through others, parsed once instead of once a file on the CI's two cores. Not for #include: every
// file includes what it uses, and a build with -DTESSEL_PCH=OFF checks that it does.
#pragma once

#include <fmt/format.h>
#include <isl/cpp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"
#include "compiler/kernel/kernel_ir.h"
#include "compiler/pipeline.h"
#include "isa/base/error.h"
#include "isa/hierarchy.h"
