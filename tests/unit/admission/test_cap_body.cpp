// The POST /_room/cap body: {"cap": N} read as Go's json.Unmarshal would.
#include <doctest/doctest.h>

#include "admission/cap_body.h"

using concert::admission::parseCapBody;

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

TEST_CASE("parseCapBody: errors name the byte Go stops at") {
  CHECK(parseCapBody("[1 23]").error == "invalid character '2' after array element");
  CHECK(parseCapBody("{\"a\" \"b\"}").error == "invalid character '\"' after object key");
  CHECK(parseCapBody("{\"a\":1 true}").error == "invalid character 't' after object key:value pair");
  CHECK(parseCapBody("{\"a\":1,]").error == "invalid character ']' looking for beginning of object key string");
  CHECK(parseCapBody("[1,]").error == "invalid character ']' looking for beginning of value");
  CHECK(parseCapBody("{\"a\":trUe}").error == "invalid character 'U' in literal true (expecting 'u')");
  CHECK(parseCapBody("{\"a\":nul}").error == "invalid character '}' in literal null (expecting 'l')");
  CHECK(parseCapBody("{\"a\":\"\\q\"}").error == "invalid character 'q' in string escape code");
  CHECK(parseCapBody("{\"a\":\"\\u12g4\"}").error == "invalid character 'g' in \\u hexadecimal character escape");
  CHECK(parseCapBody("{\"a\":-x}").error == "invalid character 'x' in numeric literal");
  CHECK(parseCapBody("{\"a\":1.x}").error == "invalid character 'x' after decimal point in numeric literal");
  CHECK(parseCapBody("{\"a\":1ex}").error == "invalid character 'x' in exponent of numeric literal");
  CHECK(parseCapBody("{\"a\":\"\x01\"}").error == "invalid character '\\x01' in string literal");
  CHECK(parseCapBody("{\"cap\":3} \"x\"").error == "invalid character '\"' after top-level value");
  CHECK(parseCapBody("\xEF\xBB\xBF{}").error == "invalid character '\\xef' looking for beginning of value");
  CHECK(parseCapBody("{\"a\":\"x").error == "unexpected end of JSON input");
  CHECK(parseCapBody("-").error == "unexpected end of JSON input");
}

TEST_CASE("parseCapBody: types as Go decodes them") {
  CHECK(parseCapBody("{\"cap\":1e2}").error ==
        "json: cannot unmarshal number 1e2 into Go struct field capRequest.cap of type int32");
  CHECK(parseCapBody("{\"cap\":99999999999999999999}").error ==
        "json: cannot unmarshal number 99999999999999999999 into Go struct field capRequest.cap of type int32");
  CHECK(parseCapBody("{\"cap\":-2147483649}").error ==
        "json: cannot unmarshal number -2147483649 into Go struct field capRequest.cap of type int32");
  CHECK(parseCapBody("{\"cap\":{}}").error ==
        "json: cannot unmarshal object into Go struct field capRequest.cap of type int32");
  CHECK(parseCapBody("{\"cap\":[1]}").error ==
        "json: cannot unmarshal array into Go struct field capRequest.cap of type int32");
  CHECK(parseCapBody("3").error == "json: cannot unmarshal number into Go value of type main.capRequest");
  CHECK(parseCapBody("\"x\"").error == "json: cannot unmarshal string into Go value of type main.capRequest");
  // the first type error is the answer, even when a later "cap" is fine; a syntax error beats both
  CHECK(parseCapBody("{\"cap\":\"x\",\"cap\":3}").error ==
        "json: cannot unmarshal string into Go struct field capRequest.cap of type int32");
  CHECK(parseCapBody("{\"cap\":\"x\",}").error == "invalid character '}' looking for beginning of object key string");
  // nested "cap" keys and other keys' values of any type are ignored
  CHECK(parseCapBody("{\"x\":{\"cap\":\"no\"},\"cap\":5,\"y\":1.5}").cap == 5);
  CHECK(parseCapBody("{\"cap\":4,\"cap\":null}").cap == 4);

  // beyond a double's range: nlohmann stops there, Go would not
  CHECK(parseCapBody("{\"cap\":1e999}").error ==
        "json: cannot unmarshal number 1e999 into Go struct field capRequest.cap of type int32");
  CHECK(parseCapBody("{\"x\":1e999,\"cap\":5}").error == "json: number 1e999 is out of range");
}
