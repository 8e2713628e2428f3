// Precompiled header of the component test programs (tests/CMakeLists.txt, option TESSEL_PCH):
// the headers most of their ~110 files include, parsed once instead of once a file (about 2 s a
// file on the CI's two cores). Not for #include: every test file includes what it uses, and a build
// with -DTESSEL_PCH=OFF checks that it does.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/emit_c/run_c.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/interpreter.h"
#include "compiler/pipeline.h"
#include "isa/base/error.h"
#include "isa/hierarchy.h"
#include "isa/npu_machine.h"
#include "npu_sim/simulator.h"
