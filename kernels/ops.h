// Everything the models and trainers compute with: include this one header.
#pragma once

#include "kernels/core/tensor.h"
#include "kernels/ops/activation.h"
#include "kernels/ops/attention.h"
#include "kernels/ops/backward.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/gemm.h"
#include "kernels/ops/loss.h"
#include "kernels/ops/norm.h"
#include "kernels/ops/paged_attention.h"
#include "kernels/ops/rope.h"
#include "kernels/ops/sampling.h"
#include "kernels/ops/softmax.h"
#include "kernels/ops/topk.h"
