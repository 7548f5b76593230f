// The one-launch backward of ln_tutorial as a C++ autograd node.
//
// A backward written in Python (a torch.autograd.Function) runs on the autograd engine's
// device thread under the GIL: at the tutorial's small sizes that Python, not the GPU,
// decides the time (docs/performance.md, runs 51 and 53). This node does what the Python
// backward does for the one-launch case -- allocate dx, the dW/dB partial rows and dW/dB,
// launch the compiled Triton kernel -- without Python. Anything else (double backward, a
// non-contiguous or misaligned gradient, another stream, a kernel it cannot lay out, a grid
// the driver refuses) is handed back to the Python backward, which handles every case.
//
// The kernel's parameters are laid out as Triton's launcher lays them out: the arguments
// that are not compile-time constants, in order, then the global and profile scratch
// pointers (both null: ln_tutorial::native checks that the kernel needs neither).
#include <torch/extension.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <cuda.h>  // Triton's copy of the driver API header
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <string>
#include <type_traits>

namespace {

using torch::autograd::SavedVariable;
using torch::autograd::variable_list;

constexpr int kArguments = 16;  // of layer_norm_bwd_one_launch_kernel, before its compile-time constants
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

// The driver launches into the calling thread's current context. The autograd engine's
// device threads may have none (the runtime makes one current only when it needs it, and
// cached allocations do not), so make the device's primary context current for the launch,
// as Triton's launcher does, and put back whatever was current before.
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

// The Python backward, ln_tutorial.native._backward(saved, dy): set once, never freed
// (a Python object must not be destroyed after the interpreter is gone).
py::object* python_backward = nullptr;
std::atomic<int64_t> launches{0};  // backward kernels this node launched itself (read by the tests)

// What the node needs besides the saved tensors, made once per shape and stream (native.py).
struct Plan {
  Plan(int64_t function, int64_t threads, int64_t shared, int64_t programs, int64_t rows_per_program,
       std::string kinds, int64_t stream, at::Tensor barrier)
      : function(function), threads(threads), shared(shared), programs(programs),
        rows_per_program(rows_per_program), kinds(std::move(kinds)), stream(reinterpret_cast<void*>(stream)),
        barrier(std::move(barrier)) {
    TORCH_CHECK(this->kinds.size() == kArguments, "ln_tutorial: expected ", kArguments, " kernel arguments");
  }
  int64_t function;          // CUfunction of the compiled kernel, 0 if the node cannot launch it
  int64_t threads;           // per program: 32 * num_warps
  int64_t shared;            // bytes of dynamic shared memory
  int64_t programs;          // the persistent grid
  int64_t rows_per_program;
  std::string kinds;         // per argument: p pointer, i int32, l int64, c compile-time constant
  void* stream;              // the forward's stream, which the barrier belongs to
  at::Tensor barrier;        // state of kernels.grid_barrier for that stream
};

struct LayerNormBackward : public torch::autograd::Node {
  SavedVariable x_, weight_, bias_, mean_, rstd_;
  std::shared_ptr<const Plan> plan_;

  std::string name() const override { return "LayerNormBackward"; }

  void release_variables() override {
    x_.reset_data();
    weight_.reset_data();
    bias_.reset_data();
    mean_.reset_data();
    rstd_.reset_data();
  }

  variable_list apply(variable_list&& grads) override {
    at::Tensor x = x_.unpack(), weight = weight_.unpack(), bias = bias_.unpack();
    at::Tensor mean = mean_.unpack(), rstd = rstd_.unpack();
    const at::Tensor& dy = grads[0];  // undefined if no gradient reached y: the Python backward uses zeros
    if (at::GradMode::is_enabled() || !fast_path_applies(dy, x)) {
      return in_python(dy, x, weight, bias, mean, rstd);
    }
    const int64_t m = x.size(0), n = x.size(1);
    at::Tensor dx = at::empty({m, n}, x.options());
    const int64_t sets = weight.defined() + bias.defined();
    at::Tensor partial = at::empty({sets, plan_->programs, n}, mean.options());
    at::Tensor dw = weight.defined() ? at::empty_like(weight) : at::Tensor();
    at::Tensor db = bias.defined() ? at::empty_like(bias) : at::Tensor();
    const at::Tensor& first = dw.defined() ? dw : db;  // the kernel's DW and DB, as the Python backward passes them
    const at::Tensor& last = db.defined() ? db : dw;
    const std::array<uint64_t, kArguments> values = {
        address(dy), address(x), address(weight), address(mean), address(rstd), address(dx), address(partial),
        address(first), address(last), address(plan_->barrier), uint64_t(dy.stride(0)), uint64_t(x.stride(0)),
        uint64_t(n), uint64_t(m), uint64_t(n), uint64_t(plan_->rows_per_program)};
    std::array<uint64_t, kArguments> wide{};
    std::array<int32_t, kArguments> narrow{};
    std::array<void*, kArguments + 2> params{};
    CUdeviceptr global_scratch = 0, profile_scratch = 0;
    int count = 0;
    for (int i = 0; i < kArguments; ++i) {
      if (plan_->kinds[i] == 'i') {
        narrow[i] = static_cast<int32_t>(values[i]);
        params[count++] = &narrow[i];
      } else if (plan_->kinds[i] != 'c') {  // pointers and int64
        wide[i] = values[i];
        params[count++] = &wide[i];
      }
    }
    params[count++] = &global_scratch;
    params[count++] = &profile_scratch;

    CUlaunchAttribute cooperative = {};
    cooperative.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    cooperative.value.cooperative = 1;
    CUlaunchConfig config = {};
    config.gridDimX = static_cast<unsigned>(plan_->programs);
    config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = static_cast<unsigned>(plan_->threads);
    config.blockDimY = config.blockDimZ = 1;
    config.sharedMemBytes = static_cast<unsigned>(plan_->shared);
    config.hStream = static_cast<CUstream>(plan_->stream);
    config.attrs = &cooperative;
    config.numAttrs = 1;
    const ContextGuard context(x.get_device());
    const CUresult status =
        driver().launch_kernel_ex(&config, reinterpret_cast<CUfunction>(plan_->function), params.data(), nullptr);
    if (status == CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE) {  // the Python backward falls back to two launches
      return in_python(dy, x, weight, bias, mean, rstd);
    }
    TORCH_CHECK(status == CUDA_SUCCESS, "ln_tutorial: launching the backward kernel failed with CUDA error ", status);
    ++launches;
    return {dx, dw, db};
  }

 private:
  static uint64_t address(const at::Tensor& t) {
    return t.defined() ? reinterpret_cast<uint64_t>(t.data_ptr()) : 0;
  }

  // The compiled kernel assumed a contiguous, 16-byte aligned dy on the forward's stream.
  bool fast_path_applies(const at::Tensor& dy, const at::Tensor& x) const {
    if (plan_->function == 0 || !dy.defined() || dy.device() != x.device() || dy.scalar_type() != x.scalar_type() ||
        !dy.is_contiguous() || dy.dim() != 2 || address(dy) % 16 != 0) {
      return false;
    }
    const auto* guard = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    return guard->getStream(x.device()).native_handle() == plan_->stream;
  }

  variable_list in_python(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight,
                          const at::Tensor& bias, const at::Tensor& mean, const at::Tensor& rstd) {
    py::gil_scoped_acquire gil;
    py::tuple grads = (*python_backward)(py::make_tuple(x, weight, bias, mean, rstd), dy);
    variable_list out;
    for (const auto& g : grads) {
      out.push_back(g.is_none() ? at::Tensor() : g.cast<at::Tensor>());
    }
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

// Give y (the forward's output, computed by the caller) this node as its grad_fn.
void attach(at::Tensor y, const at::Tensor& x, const c10::optional<at::Tensor>& weight,
            const c10::optional<at::Tensor>& bias, const at::Tensor& mean, const at::Tensor& rstd,
            std::shared_ptr<const Plan> plan) {
  const at::Tensor w = weight.value_or(at::Tensor()), b = bias.value_or(at::Tensor());
  auto node = new_node<LayerNormBackward>();
  node->set_next_edges(torch::autograd::collect_next_edges(x, w, b));
  node->x_ = SavedVariable(x, false);
  node->weight_ = SavedVariable(w, false);
  node->bias_ = SavedVariable(b, false);
  node->mean_ = SavedVariable(mean, false);
  node->rstd_ = SavedVariable(rstd, false);
  node->plan_ = std::move(plan);
  torch::autograd::set_history(y, node);
}

void set_python_backward(py::object backward) { python_backward = new py::object(std::move(backward)); }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  py::class_<Plan, std::shared_ptr<Plan>>(module, "Plan")
      .def(py::init<int64_t, int64_t, int64_t, int64_t, int64_t, std::string, int64_t, at::Tensor>());
  module.def("attach", &attach);
  module.def("set_python_backward", &set_python_backward);
  module.def("launches", [] { return launches.load(); });
}
