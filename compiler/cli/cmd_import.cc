// tessel import MODEL.onnx -o OUT.tsl [--value NAME=FILE.pb|FILE.pb ...]: an ONNX model as one .tsl def
// (compiler/onnx/importer.h), with the manifest OUT.json and the initializers as OUT_weights/*.npy.
// Exit 1 for a malformed model or an operator the language cannot express
// ("node 'NAME' (OpType): unsupported: REASON"); exit 2 when tessel was built without ONNX.
#include <iostream>

#include "compiler/cli/commands.h"
#include "compiler/cli/inputs.h"
#include "isa/base/error.h"
#ifdef TESSEL_HAVE_ONNX
#include "compiler/onnx/importer.h"
#include "compiler/onnx/tensor_proto.h"
#endif

namespace tessel::cli {
namespace {

void add_import_command(CLI::App& app, CommandContext& ctx) {
  struct Options {
    std::string model, out;
    std::vector<std::string> values;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("import", "Translate an ONNX model into a .tsl program (manifest OUT.json, weights OUT_weights/)");
  cmd->add_option("model", opts->model, "the ONNX model (.onnx)")->required();
  cmd->add_option("-o", opts->out, "the .tsl file to write")->required();
  cmd->add_option("--value", opts->values,
                  "NAME=FILE.pb (or FILE.pb: the name it carries): a graph input's value known at import time, used where a "
                  "constant is needed (Reshape's shape, Slice's starts, Gather's indices...); an input read as data stays an "
                  "input, so giving every input is harmless. With NAME=, FILE.pb is read as the input's declared type: a "
                  "TensorProto, a SequenceProto (its elements become inputs NAME_K) or an OptionalProto");
  cmd->callback([opts, &ctx] {
#ifdef TESSEL_HAVE_ONNX
    std::map<std::string, onnx::TensorProto> values;
    std::map<std::string, std::string> files;
    for (const auto& v : opts->values) {
      if (v.find('=') == std::string::npos) {  // FILE.pb alone: the name the TensorProto carries
        onnx::TensorProto t = onnx_import::read_tensor_proto(v);
        if (t.name().empty()) {  // not a named TensorProto (an ONNX sequence or optional): nothing to fold
          std::cerr << "tessel import: --value " << v << ": ignored (no tensor name; use --value NAME=" << v << ")\n";
          continue;
        }
        if (values.count(t.name())) throw UserError("--value: '" + t.name() + "' is given twice");
        values[t.name()] = std::move(t);
        continue;
      }
      auto [name, path] = name_path(v, "--value");  // read as the input's declared type: a tensor, sequence or optional
      if (values.count(name) || files.count(name)) throw UserError("--value: '" + name + "' is given twice");
      files[name] = path;
    }
    const onnx_import::ImportResult r = onnx_import::import_file(opts->model, values, files);
    onnx_import::write_import(r, opts->out, opts->model);
    std::cout << "tessel import: " << opts->model << ": " << r.nodes << " nodes -> " << r.statements << " statements of def "
              << r.def_name << " in " << opts->out << " (" << r.inputs.size() << " inputs, " << r.weights.size()
              << " from initializers)\n";
#else
    std::cerr << "tessel import: not available: tessel was built without ONNX (apt install libonnx-dev libprotobuf-dev, "
                 "then re-run cmake)\n";
    ctx.exit_code = 2;
#endif
  });
}

}  // namespace

TESSEL_REGISTER_COMMAND("import", add_import_command);

}  // namespace tessel::cli
