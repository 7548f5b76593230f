// ln_tutorial's common call in C++: the forward's launch, and the backward as an autograd node, because
// at small sizes Python's checks, allocations and launch arguments cost more than the kernels.
// * forward() takes a CUDA tensor with contiguous rows, float32 or same-dtype parameters, no subclass
//   (under autocast, half-precision tensors cast to float32 first, as torch does); any other call gets
//   None and takes the Python path. What to launch for a new kind of call is asked of Python once
//   (ln_tutorial.dispatch.cpp_forward_plan) and kept.
// * LayerNormBackward launches the backward of a call with a weight or bias, rows held in registers or
//   shared by programs; anything else (looped kernels, no parameters, double backward, an odd gradient,
//   another stream, a refused grid) goes to the Python backward.
// Parameters are laid out as Triton's launcher lays them out: the non-constant arguments in the
// kernel's order (each Kernel knows each argument's name; values are stored by name, in the lists
// below), then null global and profile scratch pointers (Python checks that the kernels need neither).
#include <torch/extension.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/saved_variable.h>

#include <ATen/EmptyTensor.h>
#include <ATen/autocast_mode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <cuda.h>  // Triton's copy of the driver API header
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace {

using torch::autograd::SavedVariable;
using torch::autograd::variable_list;

constexpr int kMaxArguments = 20;  // the most a kernel launched from here takes before its constants

// The values a forward or backward launch can pass, by the kernels' argument names.
#define LN_FORWARD_ARGUMENTS(A) A(X) A(Y) A(W) A(B) A(MEAN) A(RSTD) A(stride_x) A(stride_y) A(M) A(N) A(eps) A(eps_lo)
#define LN_BACKWARD_ARGUMENTS(A)                                                                               \
  A(DY) A(X) A(W) A(MEAN) A(RSTD) A(DX) A(PARTIAL) A(OUT0) A(OUT1) A(BARRIER) A(RECORDS) A(stride_dy) A(stride_x) \
      A(stride_dx) A(M) A(N) A(rows_per_program) A(P)
#define LN_ENUM(name) name,
#define LN_NAME(name) #name,
namespace forward_argument {
enum : int { LN_FORWARD_ARGUMENTS(LN_ENUM) count };
}
namespace backward_argument {
enum : int { LN_BACKWARD_ARGUMENTS(LN_ENUM) count };
}
const std::vector<std::string> kForwardArgumentNames = {LN_FORWARD_ARGUMENTS(LN_NAME)};
const std::vector<std::string> kBackwardArgumentNames = {LN_BACKWARD_ARGUMENTS(LN_NAME)};

// The driver's entry points, from the libcuda.so.1 that torch and Triton have loaded.
struct Driver {
  CUresult (*launch_kernel_ex)(const CUlaunchConfig*, CUfunction, void**, void**);
  CUresult (*ctx_get_current)(CUcontext*);
  CUresult (*ctx_set_current)(CUcontext);
  CUresult (*ctx_get_device)(CUdevice*);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice);
};

const Driver& driver() {
  static const Driver entry_points = [] {
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    TORCH_CHECK(library != nullptr, "ln_tutorial: cannot load libcuda.so.1");
    auto find = [library](const char* name) {
      void* symbol = dlsym(library, name);
      TORCH_CHECK(symbol != nullptr, "ln_tutorial: libcuda.so.1 has no ", name);
      return symbol;
    };
    Driver d;
    d.launch_kernel_ex = reinterpret_cast<decltype(d.launch_kernel_ex)>(find("cuLaunchKernelEx"));
    d.ctx_get_current = reinterpret_cast<decltype(d.ctx_get_current)>(find("cuCtxGetCurrent"));
    d.ctx_set_current = reinterpret_cast<decltype(d.ctx_set_current)>(find("cuCtxSetCurrent"));
    d.ctx_get_device = reinterpret_cast<decltype(d.ctx_get_device)>(find("cuCtxGetDevice"));
    d.device_get = reinterpret_cast<decltype(d.device_get)>(find("cuDeviceGet"));
    d.primary_ctx_retain = reinterpret_cast<decltype(d.primary_ctx_retain)>(find("cuDevicePrimaryCtxRetain"));
    return d;
  }();
  return entry_points;
}

void check(CUresult status, const char* what) {
  TORCH_CHECK(status == CUDA_SUCCESS, "ln_tutorial: ", what, " failed with CUDA error ", static_cast<int>(status));
}

// The driver launches into the calling thread's current context. The autograd engine's device threads
// may have none (the runtime makes one current only when it needs it, and cached allocations do not):
// make the device's primary context current for the launch, as Triton's launcher does, then restore.
class ContextGuard {
 public:
  explicit ContextGuard(int device) {
    check(driver().ctx_get_current(&previous_), "cuCtxGetCurrent");
    CUdevice current_device = -1;
    if (previous_ != nullptr) check(driver().ctx_get_device(&current_device), "cuCtxGetDevice");
    CUdevice wanted = 0;
    check(driver().device_get(&wanted, device), "cuDeviceGet");
    if (previous_ == nullptr || current_device != wanted) {
      CUcontext primary = nullptr;
      check(driver().primary_ctx_retain(&primary, wanted), "cuDevicePrimaryCtxRetain");
      check(driver().ctx_set_current(primary), "cuCtxSetCurrent");
      switched_ = true;
    }
  }
  ~ContextGuard() {
    if (switched_ && previous_ != nullptr) driver().ctx_set_current(previous_);
  }

 private:
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};

// One compiled Triton kernel and its launch configuration, made once per kind of call.
struct Kernel {
  Kernel(int64_t function, int64_t threads, int64_t shared, int64_t programs, int64_t programs_y, std::string kinds,
         std::vector<int> slots)
      : function(function), threads(threads), shared(shared), programs(programs), programs_y(programs_y),
        kinds(std::move(kinds)), slots(std::move(slots)) {
    TORCH_CHECK(this->kinds.size() <= kMaxArguments && this->slots.size() == this->kinds.size(),
                "ln_tutorial: a kernel with too many arguments, or a slot per argument missing");
  }
  int64_t function;   // CUfunction, 0 if it cannot be launched from here
  int64_t threads;    // per program: 32 * num_warps
  int64_t shared;     // bytes of dynamic shared memory
  int64_t programs;   // the grid: programs x programs_y
  int64_t programs_y;
  std::string kinds;  // per argument: p pointer, i int32, l int64, f float32, c compile-time constant
  std::vector<int> slots;  // per argument: where its value is in the `values` of a launch

  // Launch with `values`, indexed by argument name (pointers as addresses, a float32 as its bits).
  CUresult launch(const uint64_t* values, void* stream, int device, bool cooperative) const {
    std::array<uint64_t, kMaxArguments> wide{};
    std::array<uint32_t, kMaxArguments> narrow{};
    std::array<void*, kMaxArguments + 2> params{};
    CUdeviceptr global_scratch = 0, profile_scratch = 0;
    int count = 0;
    for (size_t i = 0; i < kinds.size(); ++i) {
      if (kinds[i] == 'i' || kinds[i] == 'f') {
        narrow[i] = static_cast<uint32_t>(values[slots[i]]);
        params[count++] = &narrow[i];
      } else if (kinds[i] != 'c') {  // pointers and int64
        wide[i] = values[slots[i]];
        params[count++] = &wide[i];
      }
    }
    params[count++] = &global_scratch;
    params[count++] = &profile_scratch;

    CUlaunchAttribute attribute = {};
    attribute.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attribute.value.cooperative = 1;
    CUlaunchConfig config = {};
    config.gridDimX = static_cast<unsigned>(programs);
    config.gridDimY = static_cast<unsigned>(programs_y);
    config.gridDimZ = 1;
    config.blockDimX = static_cast<unsigned>(threads);
    config.blockDimY = config.blockDimZ = 1;
    config.sharedMemBytes = static_cast<unsigned>(shared);
    config.hStream = static_cast<CUstream>(stream);
    config.attrs = &attribute;
    config.numAttrs = cooperative ? 1 : 0;
    const ContextGuard context(device);
    return driver().launch_kernel_ex(&config, reinterpret_cast<CUfunction>(function), params.data(), nullptr);
  }
};

uint64_t address(const at::Tensor& t) { return t.defined() ? reinterpret_cast<uint64_t>(t.data_ptr()) : 0; }

uint64_t float_bits(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// Elements between two rows of x: (M, N) with contiguous rows, or contiguous with any number of dimensions.
int64_t row_stride(const at::Tensor& x) { return x.dim() == 2 ? x.stride(0) : x.size(-1); }

void* current_stream(const c10::Device& device) {
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device).native_handle();
}

// A new tensor of `sizes` and `dtype` on `like`'s GPU. When that GPU is the current one and `like` came
// from PyTorch's CUDA allocator, made as at::empty makes it minus the operator dispatch, which costs
// about as much again as the allocation itself.
at::Tensor new_tensor(at::IntArrayRef sizes, at::ScalarType dtype, const at::Tensor& like) {
  c10::Allocator* allocator = c10::GetAllocator(c10::DeviceType::CUDA);
  if (like.storage().allocator() != allocator ||
      c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice() != like.device()) {
    return at::empty(sizes, like.options().dtype(dtype));
  }
  return at::detail::empty_generic(sizes, allocator, c10::DispatchKeySet(c10::DispatchKey::CUDA), dtype, std::nullopt);
}

// Set once when native.py loads the extension, never freed (a Python object must not be destroyed
// after the interpreter is gone): dispatch's Python backward and maker of forward plans.
py::object* python_backward = nullptr;
py::object* python_forward_plan = nullptr;
std::atomic<int64_t> forward_launches{0}, backward_launches{0};  // launched from here (read by the tests)

// The backward node's kernels, made once per shape and stream (dispatch._cpp_backward_plan).
struct BackwardPlan {
  BackwardPlan(Kernel kernel, std::optional<Kernel> reduce, int64_t partial_rows, int64_t rows_per_program,
               int64_t stream, at::Tensor barrier, std::optional<at::Tensor> records, int64_t records_lifetime)
      : kernel(std::move(kernel)), reduce(std::move(reduce)), partial_rows(partial_rows),
        rows_per_program(rows_per_program), stream(reinterpret_cast<void*>(stream)), barrier(std::move(barrier)),
        records(records.value_or(at::Tensor())), records_lifetime(records_lifetime) {}
  // layer_norm_bwd_one_launch_kernel or layer_norm_bwd_split_kernel (cooperative grids), or, past
  // one_launch.MAX_BYTES, layer_norm_bwd_persistent_kernel followed by partial_sum_kernel (reduce)
  Kernel kernel;
  std::optional<Kernel> reduce;
  int64_t partial_rows;      // dW/dB partial rows per set
  int64_t rows_per_program;  // rows of one program, or of one group of programs sharing rows (split)
  void* stream;              // the forward's stream, which the barrier belongs to
  at::Tensor barrier;        // state of cooperative.grid_barrier for that stream
  at::Tensor records;        // the split kernel's records (see split.records_state), or undefined
  int64_t records_lifetime;  // launches after which the records are zeroed again (split.RECORDS_LIFETIME)
  mutable int64_t launches = 0;  // with these records; one stream's launches, on the autograd engine's thread
};

// The forward's kernel for one kind of call, and the node's plan if y needs one.
struct ForwardPlan {
  ForwardPlan(Kernel kernel, std::shared_ptr<BackwardPlan> node) : kernel(std::move(kernel)), node(std::move(node)) {}
  Kernel kernel;  // a forward kernel: the default ones, or the two-tile variant
  std::shared_ptr<const BackwardPlan> node;  // null: no gradient is needed, or the node hands it to Python
};

struct LayerNormBackward : public torch::autograd::Node {
  SavedVariable x_, weight_, bias_, mean_, rstd_;
  std::shared_ptr<const BackwardPlan> plan_;

  std::string name() const override { return "LayerNormBackward"; }

  void release_variables() override {
    x_.reset_data();
    weight_.reset_data();
    bias_.reset_data();
    mean_.reset_data();
    rstd_.reset_data();
  }

  // x is the caller's input: (M, N) with any row stride, or contiguous with more dimensions.
  variable_list apply(variable_list&& grads) override {
    at::Tensor x = x_.unpack(), weight = weight_.unpack(), bias = bias_.unpack();
    at::Tensor mean = mean_.unpack(), rstd = rstd_.unpack();
    const at::Tensor& dy = grads[0];  // undefined if no gradient reached y: the Python backward uses zeros
    if (at::GradMode::is_enabled() || !fast_path_applies(dy, x)) {
      return in_python(dy, x, weight, bias, mean, rstd);
    }
    const int64_t n = x.size(-1), m = mean.size(0);
    at::Tensor dx = new_tensor(x.sizes(), x.scalar_type(), x);
    const int64_t sets = weight.defined() + bias.defined();
    at::Tensor partial = new_tensor({sets, plan_->partial_rows, n}, mean.scalar_type(), x);
    at::Tensor dw = weight.defined() ? new_tensor(weight.sizes(), weight.scalar_type(), x) : at::Tensor();
    at::Tensor db = bias.defined() ? new_tensor(bias.sizes(), bias.scalar_type(), x) : at::Tensor();
    const int device = x.get_device();
    namespace arg = backward_argument;
    std::array<uint64_t, arg::count> values{};
    values[arg::DY] = address(dy);
    values[arg::X] = address(x);
    values[arg::W] = address(weight);
    values[arg::MEAN] = address(mean);
    values[arg::RSTD] = address(rstd);
    values[arg::DX] = address(dx);
    values[arg::PARTIAL] = address(partial);
    values[arg::OUT0] = address(dw.defined() ? dw : db);  // the kernels' first gradient and last one,
    values[arg::OUT1] = address(db.defined() ? db : dw);  // as the Python backward passes them
    values[arg::BARRIER] = address(plan_->barrier);
    if (plan_->records.defined() && ++plan_->launches > plan_->records_lifetime) {
      plan_->records.zero_();  // tags come round again: see split.records_state
      plan_->launches = 1;
    }
    values[arg::RECORDS] = address(plan_->records);
    values[arg::stride_dy] = uint64_t(n);
    values[arg::stride_x] = row_stride(x);
    values[arg::stride_dx] = uint64_t(n);
    values[arg::M] = uint64_t(m);
    values[arg::N] = uint64_t(n);
    values[arg::rows_per_program] = plan_->rows_per_program;
    values[arg::P] = plan_->partial_rows;
    if (plan_->reduce) {
      check(plan_->kernel.launch(values.data(), plan_->stream, device, false), "launching the backward kernel");
      check(plan_->reduce->launch(values.data(), plan_->stream, device, false), "launching the dW/dB sum");
    } else {
      const CUresult status = plan_->kernel.launch(values.data(), plan_->stream, device, true);
      if (status == CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE) {  // the Python backward falls back to two launches
        return in_python(dy, x, weight, bias, mean, rstd);
      }
      check(status, "launching the backward kernel");
    }
    ++backward_launches;
    return {dx, dw, db};
  }

 private:
  // The compiled kernel assumed a contiguous, 16-byte aligned dy on the forward's stream.
  bool fast_path_applies(const at::Tensor& dy, const at::Tensor& x) const {
    if (plan_ == nullptr || plan_->kernel.function == 0 || !dy.defined() || dy.device() != x.device() ||
        dy.scalar_type() != x.scalar_type() || !dy.is_contiguous() || address(dy) % 16 != 0) {
      return false;
    }
    return current_stream(x.device()) == plan_->stream;
  }

  // The Python backward takes (M, N) rows; its dx goes back in x's shape.
  variable_list in_python(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight,
                          const at::Tensor& bias, const at::Tensor& mean, const at::Tensor& rstd) {
    const bool rows = x.dim() == 2;
    const at::Tensor x_rows = rows ? x : x.view({mean.size(0), x.size(-1)});
    const at::Tensor dy_rows = rows || !dy.defined() ? dy : dy.reshape(x_rows.sizes());
    variable_list out;
    {
      py::gil_scoped_acquire gil;
      py::tuple grads = (*python_backward)(py::make_tuple(x_rows, weight, bias, mean, rstd), dy_rows);
      for (const auto& g : grads) {
        out.push_back(g.is_none() ? at::Tensor() : g.cast<at::Tensor>());
      }
    }
    if (!rows) out[0] = out[0].view(x.sizes());
    return out;
  }
};

// Nodes are held by std::shared_ptr up to PyTorch 2.11 or so, by c10::intrusive_ptr later.
template <typename T>
auto new_node() {
  if constexpr (std::is_base_of_v<c10::intrusive_ptr_target, torch::autograd::Node>) {
    return c10::make_intrusive<T>();
  } else {
    return std::make_shared<T>();
  }
}

// Give y this node as its grad_fn.
void attach(const at::Tensor& y, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
            const at::Tensor& mean, const at::Tensor& rstd, std::shared_ptr<const BackwardPlan> plan) {
  auto node = new_node<LayerNormBackward>();
  node->set_next_edges(torch::autograd::collect_next_edges(x, weight, bias));
  node->x_ = SavedVariable(x, false);
  node->weight_ = SavedVariable(weight, false);
  node->bias_ = SavedVariable(bias, false);
  node->mean_ = SavedVariable(mean, false);
  node->rstd_ = SavedVariable(rstd, false);
  node->plan_ = std::move(plan);
  torch::autograd::set_history(y, node);
}

// --- the forward ---------------------------------------------------------------------------

// What the forward's launch depends on besides the tensors' addresses (all 16-byte aligned).
struct CallKind {
  int64_t m, n, row_stride;
  void* stream;
  int8_t device, dtype, weight_dtype, bias_dtype;  // -1: no weight / bias
  bool needs_node;
  bool operator==(const CallKind& o) const {
    return m == o.m && n == o.n && row_stride == o.row_stride && stream == o.stream && device == o.device &&
           dtype == o.dtype && weight_dtype == o.weight_dtype && bias_dtype == o.bias_dtype &&
           needs_node == o.needs_node;
  }
};

struct CallKindHash {
  size_t operator()(const CallKind& k) const {
    size_t h = std::hash<int64_t>()(k.m);
    for (const size_t part : {std::hash<int64_t>()(k.n), std::hash<int64_t>()(k.row_stride),
                              std::hash<void*>()(k.stream),
                              size_t((k.device << 24) ^ (k.dtype << 16) ^ ((k.weight_dtype & 0xff) << 8) ^
                                     ((k.bias_dtype & 0xff) << 1) ^ k.needs_node)}) {
      h = h * 1000003u ^ part;
    }
    return h;
  }
};

// Plans by kind of call; null: the Python path takes such calls. Used under the GIL only. Never
// destroyed: the plans hold CUDA tensors, which must not be freed at exit, after PyTorch's allocator.
auto& forward_plans = *new std::unordered_map<CallKind, std::shared_ptr<const ForwardPlan>, CallKindHash>();
constexpr size_t kMaxPlans = 1024;  // many shapes (varying sequence lengths): start again

bool is_aligned(const at::Tensor& t) { return !t.defined() || address(t) % 16 == 0; }

bool is_half(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }

// The tensor behind `object` if it is a plain tensor (or Parameter) with storage, else undefined.
at::Tensor plain_tensor(PyObject* object) {
  if (!THPVariable_CheckExact(object)) return at::Tensor();
  const at::Tensor& t = THPVariable_Unpack(object);
  if (!t.has_storage() || t.layout() != at::kStrided || t.is_neg()) return at::Tensor();  // no functorch wrappers
  return t;
}

// Under autocast torch computes layer_norm in float32, half-precision tensors cast first; so does this.
at::Tensor as_autocast_casts(const at::Tensor& t, bool autocast) {
  return autocast && t.defined() && is_half(t.scalar_type()) ? t.to(at::kFloat) : t;
}

// A weight or bias the forward kernel can take as it is: (N,), contiguous, aligned, on x's GPU. Under
// autocast (x float32 by now) a half-precision one is taken uncast: the kernels compute in float32 and
// round its gradient once to its dtype, as the cast's backward would: the same bits, two casts saved.
bool usable_parameter(PyObject* object, at::Tensor& out, const at::Tensor& x, int64_t n, bool autocast) {
  if (object == Py_None) return true;
  out = plain_tensor(object);
  const bool read_as_cast = autocast && out.defined() && is_half(out.scalar_type()) && x.scalar_type() == at::kFloat;
  if (!read_as_cast) out = as_autocast_casts(out, autocast);
  return out.defined() && out.dim() == 1 && out.size(0) == n && (out.stride(0) == 1 || n == 1) &&
         out.device() == x.device() && is_aligned(out) &&
         (out.scalar_type() == x.scalar_type() || read_as_cast ||
          (out.scalar_type() == at::kFloat && is_half(x.scalar_type())));
}

// The row length from layer_norm's normalized_shape if it names one dimension, else 0.
int64_t row_length(PyObject* shape) {
  if ((PyTuple_Check(shape) || PyList_Check(shape)) && PySequence_Fast_GET_SIZE(shape) == 1) {
    shape = PySequence_Fast_GET_ITEM(shape, 0);
  }
  if (!PyLong_CheckExact(shape)) return 0;
  const long long n = PyLong_AsLongLong(shape);
  if (n == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return 0;
  }
  return n;
}

// ln_tutorial.layer_norm(input, normalized_shape, weight, bias, eps) for the common call; None otherwise.
py::object forward(py::handle input, py::handle normalized_shape, py::handle weight_object, py::handle bias_object,
                   py::handle eps_object) {
  at::Tensor x = plain_tensor(input.ptr());
  const int64_t n = row_length(normalized_shape.ptr());
  if (!x.defined() || !x.is_cuda() || n <= 0 || x.dim() < 1 || x.size(-1) != n || !PyFloat_Check(eps_object.ptr())) {
    return py::none();
  }
  const double eps = PyFloat_AS_DOUBLE(eps_object.ptr());
  if (!(eps >= 0 && std::isfinite(eps))) return py::none();  // the Python code names the bad eps
  if (!(is_half(x.scalar_type()) || x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble) || x.numel() == 0) {
    return py::none();
  }
  const bool autocast = at::autocast::is_autocast_enabled(at::kCUDA);
  x = as_autocast_casts(x, autocast);
  const at::ScalarType dtype = x.scalar_type();
  if (!is_aligned(x) || !(x.dim() == 2 ? x.stride(1) == 1 || n == 1 : x.is_contiguous())) return py::none();
  const int64_t stride = row_stride(x);
  at::Tensor weight, bias;
  if (!usable_parameter(weight_object.ptr(), weight, x, n, autocast) ||
      !usable_parameter(bias_object.ptr(), bias, x, n, autocast) ||
      (weight.defined() && bias.defined() && weight.scalar_type() != bias.scalar_type())) {
    return py::none();
  }
  if (torch::autograd::isFwGradDefined(x) || torch::autograd::isFwGradDefined(weight) ||
      torch::autograd::isFwGradDefined(bias)) {
    return py::none();  // forward-mode AD: the Python path
  }
  const bool needs_node = at::GradMode::is_enabled() && (x.requires_grad() || (weight.defined() && weight.requires_grad()) ||
                                                         (bias.defined() && bias.requires_grad()));
  const int64_t m = x.numel() / n;
  auto code = [](const at::Tensor& t) { return t.defined() ? static_cast<int8_t>(t.scalar_type()) : int8_t(-1); };
  const CallKind kind{m,        n,           stride, current_stream(x.device()), static_cast<int8_t>(x.get_device()),
                      code(x), code(weight), code(bias), needs_node};
  auto found = forward_plans.find(kind);
  if (found == forward_plans.end()) {
    if (forward_plans.size() >= kMaxPlans) forward_plans.clear();
    auto dtype_of = [](const at::Tensor& t) {  // torch.dtype, or None for a missing parameter
      if (!t.defined()) return py::object(py::none());
      return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(t.scalar_type())));
    };
    py::object plan = (*python_forward_plan)(x.get_device(), reinterpret_cast<int64_t>(kind.stream), m, n, stride,
                                             dtype_of(x), dtype_of(weight), dtype_of(bias), needs_node);
    found = forward_plans.emplace(kind, plan.is_none() ? nullptr : plan.cast<std::shared_ptr<ForwardPlan>>()).first;
  }
  const std::shared_ptr<const ForwardPlan>& plan = found->second;
  if (plan == nullptr) return py::none();

  at::Tensor y = new_tensor(x.sizes(), dtype, x);
  const at::ScalarType stats_dtype = dtype == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor mean = new_tensor({m}, stats_dtype, x), rstd = new_tensor({m}, stats_dtype, x);
  const float eps_high = static_cast<float>(eps);  // as Triton passes a Python float, and the rest
  const float eps_low = static_cast<float>(eps - static_cast<double>(eps_high));
  namespace arg = forward_argument;
  std::array<uint64_t, arg::count> values{};
  values[arg::X] = address(x);
  values[arg::Y] = address(y);
  values[arg::W] = address(weight);
  values[arg::B] = address(bias);
  values[arg::MEAN] = address(mean);
  values[arg::RSTD] = address(rstd);
  values[arg::stride_x] = uint64_t(stride);
  values[arg::stride_y] = uint64_t(n);
  values[arg::M] = uint64_t(m);
  values[arg::N] = uint64_t(n);
  values[arg::eps] = float_bits(eps_high);
  values[arg::eps_lo] = float_bits(eps_low);
  const CUresult status = plan->kernel.launch(values.data(), kind.stream, x.get_device(), false);
  TORCH_CHECK(status == CUDA_SUCCESS, "ln_tutorial: launching the forward kernel failed with CUDA error ", status);
  ++forward_launches;
  if (needs_node) attach(y, x, weight, bias, mean, rstd, plan->node);
  return py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(y)));
}

void set_python_side(py::object backward, py::object forward_plan) {
  python_backward = new py::object(std::move(backward));
  python_forward_plan = new py::object(std::move(forward_plan));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  py::class_<Kernel>(module, "Kernel")
      .def(py::init<int64_t, int64_t, int64_t, int64_t, int64_t, std::string, std::vector<int>>());
  py::class_<BackwardPlan, std::shared_ptr<BackwardPlan>>(module, "BackwardPlan")
      .def(py::init<Kernel, std::optional<Kernel>, int64_t, int64_t, int64_t, at::Tensor, std::optional<at::Tensor>,
                    int64_t>());
  py::class_<ForwardPlan, std::shared_ptr<ForwardPlan>>(module, "ForwardPlan")
      .def(py::init<Kernel, std::shared_ptr<BackwardPlan>>());
  module.attr("FORWARD_ARGUMENTS") = kForwardArgumentNames;
  module.attr("BACKWARD_ARGUMENTS") = kBackwardArgumentNames;
  module.def("forward", &forward);
  module.def("set_python_side", &set_python_side);
  module.def("launches", [] {
    return py::make_tuple(forward_launches.load(), backward_launches.load());
  });
}
