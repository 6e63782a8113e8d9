// The JSON writer (Go-compatible bytes) and the strict {"cap": N} parser.
#include <doctest/doctest.h>

#include "common/json.h"

using namespace concert::common;

TEST_CASE("JsonObject writes Go's bytes") {
  CHECK(JsonObject().str() == "{}");
  CHECK(JsonObject().add("a", true).add("b", int64_t{-3}).add("c", "x").str() == "{\"a\":true,\"b\":-3,\"c\":\"x\"}");
  CHECK(JsonObject().add("s", "q\"b\\n\n<&>\x01").str() == "{\"s\":\"q\\\"b\\\\n\\n<&>\\u0001\"}");
  CHECK(JsonObject().add("u", "\xe2\x80\xa8").str() == "{\"u\":\"\\u2028\"}");
  std::string f;
  appendJsonFloat(f, 0.0);
  CHECK(f == "0");
  f.clear();
  appendJsonFloat(f, 1.0);
  CHECK(f == "1");
  f.clear();
  appendJsonFloat(f, 0.1);
  CHECK(f == "0.1");
  f.clear();
  appendJsonFloat(f, 2.5);
  CHECK(f == "2.5");
  f.clear();
  appendJsonFloat(f, 1e-7);
  CHECK(f == "1e-7");
  f.clear();
  appendJsonFloat(f, 1e21);
  CHECK(f == "1e+21");
  f.clear();
  appendJsonFloat(f, 123456789.0);
  CHECK(f == "123456789");
}

TEST_CASE("parseCapBody") {
  CHECK(parseCapBody("{\"cap\":3}").cap == 3);
  CHECK(parseCapBody("{\"cap\":3}").error.empty());
  CHECK(parseCapBody(" { \"other\": [1, {\"x\": null}], \"cap\" : 7 } ").cap == 7);
  CHECK(parseCapBody("{\"cap\":1,\"cap\":9}").cap == 9);
  CHECK(parseCapBody("{\"CAP\":4}").cap == 4);
  CHECK(parseCapBody("{\"cap\":2147483647}").cap == 2147483647);
  CHECK(parseCapBody("{\"cap\":-5}").cap == -5);

  // missing or null cap: no error, 0 (the handler then says "invalid capacity 0")
  CHECK(parseCapBody("{}").error.empty());
  CHECK(parseCapBody("{}").cap == 0);
  CHECK(parseCapBody("{\"cap\":null}").cap == 0);
  CHECK(parseCapBody("null").error.empty());

  CHECK(parseCapBody("").error == "unexpected end of JSON input");
  CHECK(parseCapBody("   ").error == "unexpected end of JSON input");
  CHECK(parseCapBody("not json").error == "invalid character 'o' in literal null (expecting 'u')");
  CHECK(parseCapBody("{\"cap\":3").error == "unexpected end of JSON input");
  CHECK(parseCapBody("{\"cap\":3} x").error == "invalid character 'x' after top-level value");
  CHECK(parseCapBody("{cap:3}").error == "invalid character 'c' looking for beginning of object key string");
  CHECK(parseCapBody("{\"cap\":\"3\"}").error ==
        "json: cannot unmarshal string into Go struct field capRequest.cap of type int32");
  CHECK(parseCapBody("{\"cap\":3000000000}").error ==
        "json: cannot unmarshal number 3000000000 into Go struct field capRequest.cap of type int32");
  CHECK(parseCapBody("{\"cap\":1.5}").error ==
        "json: cannot unmarshal number 1.5 into Go struct field capRequest.cap of type int32");
  CHECK(parseCapBody("{\"cap\":true}").error ==
        "json: cannot unmarshal bool into Go struct field capRequest.cap of type int32");
  CHECK(parseCapBody("[3]").error == "json: cannot unmarshal array into Go value of type main.capRequest");
  CHECK(parseCapBody("{\"cap\":01}").error == "invalid character '1' after object key:value pair");
  CHECK_FALSE(parseCapBody("{\"cap\":3,}").error.empty());
  CHECK_FALSE(parseCapBody("{\"a\":\"\\q\"}").error.empty());
}
