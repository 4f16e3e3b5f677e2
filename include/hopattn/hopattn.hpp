// Umbrella header: everything a user of hopattn needs.
#pragma once

#include "hopattn/api.hpp"
#include "hopattn/batch.hpp"
#include "hopattn/dlpack.h"
#include "hopattn/dtype.hpp"
#include "hopattn/error.hpp"
#include "hopattn/options.hpp"
#include "hopattn/tensor_view.hpp"
