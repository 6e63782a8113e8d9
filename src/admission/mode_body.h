// The body of POST /_room/mode: {"mode": "open" | "pause" | "reject" |
// "passthrough"}. Strict, unlike the Go-compatible cap body: the key is
// exact, its value a string naming a mode; other keys are ignored.
#pragma once

#include <string>
#include <string_view>

#include "shm/types.h"

namespace concert::admission {

struct ModeBody {
  shm::RoomMode mode = shm::RoomMode::Open;
  std::string error;  // non-empty: answered 400 {"error": error}
};

ModeBody parseModeBody(std::string_view body);

}  // namespace concert::admission
