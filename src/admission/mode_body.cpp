// See mode_body.h.
#include "admission/mode_body.h"

#include <nlohmann/json.hpp>

namespace concert::admission {

ModeBody parseModeBody(std::string_view body) {
  constexpr std::string_view kExpected = R"(expected {"mode": "open|pause|reject|passthrough"})";
  ModeBody out;
  nlohmann::json doc = nlohmann::json::parse(body, nullptr, false);
  if (doc.is_discarded()) {
    out.error = "invalid JSON body: " + std::string(kExpected);
    return out;
  }
  if (!doc.is_object() || !doc.contains("mode")) {
    out.error = "missing \"mode\": " + std::string(kExpected);
    return out;
  }
  const nlohmann::json& mode = doc["mode"];
  if (!mode.is_string()) {
    out.error = "\"mode\" must be a string: " + std::string(kExpected);
    return out;
  }
  const std::string& name = mode.get_ref<const std::string&>();
  std::optional<shm::RoomMode> parsed = shm::parseRoomMode(name);
  if (!parsed) {
    // The answer escapes the name; a long one is not echoed.
    const std::string shown = name.size() <= 32 ? " \"" + name + "\"" : std::string();
    out.error = "unknown mode" + shown + ": must be open, pause, reject or passthrough";
    return out;
  }
  out.mode = *parsed;
  return out;
}

}  // namespace concert::admission
