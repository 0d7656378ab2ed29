// fuzz_config: configuration text through the loader (what config::load_from_file does after
// reading the file: parse without exceptions, then config::load_from_json), with environment
// overrides. Input: optional "NAME=value" lines, a line "---", then the JSON document; without a
// "---" line the whole input is the document.
// Invariants: never throws; a loaded snapshot (with its typed settings) answers every getter without
// throwing and describes itself as valid JSON; effective values -> JSON document -> load gives the
// same values and the same settings.

#include "config/snapshot.hpp"
#include "fuzz/fuzz_support.hpp"

#include <cstddef>
#include <cstdint>
#include <map>

using namespace changeflow;
using nlohmann::json;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> env;
  if (auto sep = text.find("\n---\n"); sep != std::string::npos || text.rfind("---\n", 0) == 0) {
    std::size_t header_end = sep == std::string::npos ? 0 : sep + 1;
    std::string header = text.substr(0, header_end);
    text = text.substr(header_end + 4);
    for (std::size_t start = 0; start < header.size();) {
      auto nl = header.find('\n', start);
      if (nl == std::string::npos) nl = header.size();
      auto line = header.substr(start, nl - start);
      if (auto eq = line.find('='); eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
      start = nl + 1;
    }
  }
  auto lookup = [&env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };

  auto doc = json::parse(text, nullptr, false);
  if (doc.is_discarded()) return 0;  // load_from_file: "is not valid JSON"
  auto loaded = config::load_from_json(doc, lookup);
  FUZZ_CHECK((loaded.snap == nullptr) == !loaded.errors.empty(), "a snapshot exactly when there are no errors");
  if (!loaded.snap) {
    for (const auto& e : loaded.errors) FUZZ_CHECK(!e.empty(), "errors are named");
    return 0;
  }
  const auto& snap = *loaded.snap;
  json effective = json::object();
  for (const auto& spec : config::all_keys()) {
    (void)snap.get_int(spec.name);
    (void)snap.get_number(spec.name);
    (void)snap.get_bool(spec.name);
    (void)snap.get_string(spec.name);
    (void)snap.get_list(spec.name);
    effective[std::string(spec.name)] = snap.get_json(spec.name);  // dotted keys are accepted
  }
  // The ops API serves describe(); a value from the environment may carry any bytes.
  (void)snap.describe().dump(-1, ' ', false, json::error_handler_t::replace);
  auto again = config::load_from_json(effective, [](const std::string&) { return std::nullopt; });
  FUZZ_CHECK(again.snap != nullptr, "effective values load again");
  for (const auto& spec : config::all_keys()) {
    FUZZ_CHECK(again.snap->get_json(spec.name) == snap.get_json(spec.name), "load -> values -> load is stable");
  }
  FUZZ_CHECK(snap.restart_keys_changed(*again.snap).empty(), "no restart key differs after the round trip");
  FUZZ_CHECK(again.snap->settings() == snap.settings(), "the typed settings follow the values alone");
  return 0;
}
