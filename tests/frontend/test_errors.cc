// The malformed programs of tests/errors/tsl/: each is rejected with a UserError whose first line
// is "FILE:LINE:COL: message" as written after "# expect: " on the file's first line, followed by
// the source line and a caret under the column.
#include <doctest/doctest.h>

#include <vector>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "compiler/frontend/frontend.h"
#include "isa/base/error.h"

using namespace tessel;

TEST_CASE("every malformed program fails at its expected line:col with its expected message") {
  const std::filesystem::path dir = std::filesystem::path(TESSEL_SOURCE_DIR) / "tests/errors/tsl";
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".tsl") continue;
    ++count;
    const std::string path = entry.path().string();
    CAPTURE(path);
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    const std::string text = s.str();
    const std::string prefix = "# expect: ";
    REQUIRE(text.rfind(prefix, 0) == 0);
    const std::string expect = text.substr(prefix.size(), text.find('\n') - prefix.size());
    const int line = std::stoi(expect);
    const int col = std::stoi(expect.substr(expect.find(':') + 1));
    std::string message;
    try {
      frontend::parse_module(text, path);
    } catch (const UserError& e) {
      message = e.what();
    }
    REQUIRE_MESSAGE(!message.empty(), "accepted");
    CHECK(message.rfind(path + ":" + expect, 0) == 0);
    // Three lines: message, the source line, the caret under column `col`.
    const size_t first_nl = message.find('\n');
    REQUIRE(first_nl != std::string::npos);
    const size_t second_nl = message.find('\n', first_nl + 1);
    REQUIRE(second_nl != std::string::npos);
    const std::string caret = message.substr(second_nl + 1);
    const std::string shown = message.substr(first_nl + 1, second_nl - first_nl - 1);
    CHECK(caret.back() == '^');
    if (col <= 81) {
      CHECK(caret.size() == 2 + static_cast<size_t>(col));  // the line from its start
    } else {
      // a long line is shown as "..." and 160 characters around the column, the caret under it
      CHECK(shown.rfind("  ...", 0) == 0);
      CHECK(shown.size() <= 2 + 3 + 160 + 3);
    }
    // the caret points at the column's character in the line as shown
    std::vector<std::string> lines;
    for (size_t at = 0; at <= text.size();) {
      const size_t nl = std::min(text.find('\n', at), text.size());
      lines.push_back(text.substr(at, nl - at));
      at = nl + 1;
    }
    const std::string& src = lines.at(line - 1);
    if (static_cast<size_t>(col) <= src.size() && caret.size() <= shown.size()) {
      const unsigned char c = static_cast<unsigned char>(src[col - 1]);
      if (c >= 0x20 && c < 0x7f) CHECK(shown[caret.size() - 1] == src[col - 1]);
    }
    CHECK(line >= 1);
  }
  CHECK(count >= 30);
}
