// A segment whose lines follow the room's rules (admission::Room), as every
// process of a running server installs them. Without it the lines move by
// the cap alone.
#pragma once

#include <deque>
#include <memory>

#include "admission/room.h"
#include "shm/segment.h"

inline concert::admission::Room& followRoomRules(concert::shm::Segment& segment) {
  // Kept for the test process's life: a segment may outlive its test's scope.
  static std::deque<std::unique_ptr<concert::admission::Room>> rooms;
  rooms.push_back(std::make_unique<concert::admission::Room>(segment));
  segment.setGate(rooms.back().get());
  return *rooms.back();
}
