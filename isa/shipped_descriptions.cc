#include "isa/shipped_descriptions.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "isa/base/error.h"

namespace tessel::isa {

namespace fs = std::filesystem;

std::string find_shipped_file(const std::string& rel) {
  std::error_code ec;
  if (const char* src = std::getenv("TESSEL_SOURCE_DIR"); src && *src)
    if (fs::exists(fs::path(src) / rel, ec)) return (fs::path(src) / rel).string();
  std::vector<fs::path> roots = {fs::current_path(ec)};
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) roots.push_back(exe.parent_path());
#ifdef TESSEL_SOURCE_DIR
  roots.push_back(TESSEL_SOURCE_DIR);
#endif
  for (fs::path root : roots)
    for (int up = 0; up < 6 && !root.empty(); ++up, root = root.parent_path()) {
      if (fs::exists(root / rel, ec)) return (root / rel).string();
      if (root == root.parent_path()) break;
    }
  return "";
}

std::string shipped_description_path(const std::string& name) {
  const std::string rel = "isa/targets/" + name + ".yaml";
  if (std::string path = find_shipped_file(rel); !path.empty()) return path;
#ifdef TESSEL_SOURCE_DIR
  return std::string(TESSEL_SOURCE_DIR) + "/" + rel;
#else
  return rel;
#endif
}

std::vector<std::string> shipped_description_names() {
  std::vector<std::string> names;
  const std::string dir = find_shipped_file("isa/targets");
  if (dir.empty()) return names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string resolve_target(const std::string& target, const std::string& option, bool allow_c) {
  std::error_code ec;
  // a directory of that name is not a description: a bare name still means the shipped one
  if ((allow_c && target == "c") || target.empty() || fs::is_regular_file(target, ec)) return target;
  const bool bare = target.find('/') == std::string::npos && !target.ends_with(".yaml") && !target.ends_with(".yml");
  if (!bare) return target;
  if (std::string path = find_shipped_file("isa/targets/" + target + ".yaml"); !path.empty()) return path;
  std::string known = allow_c ? "c" : "";
  for (const std::string& n : shipped_description_names()) known += (known.empty() ? "" : ", ") + n;
  const bool found = !shipped_description_names().empty();
  throw UserError(option + " " + target + ": no such file and no shipped description of that name (" +
                  (found ? "shipped: " + known : std::string("isa/targets/ was not found: set TESSEL_SOURCE_DIR or give a path")) +
                  ")");
}

}  // namespace tessel::isa
