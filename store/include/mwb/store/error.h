#pragma once
// The one error type of store/: its message names the store file and what was expected, e.g.
// "store /x/history.sqlite has schema version 7; this build reads versions up to 2".
#include <stdexcept>
#include <string>

namespace mwb::store {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

}  // namespace mwb::store
