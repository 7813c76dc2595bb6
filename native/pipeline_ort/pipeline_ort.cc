// pipeline_ort: a native Triton backend that runs one ONNX file with ONNX Runtime on the CPU.
//
// The bench's embedded server (the nvidia-pytriton wheel) ships no onnxruntime backend. This backend
// stands in for it without the python backend's extra process: Triton calls execute() in its own
// process, the requests Triton's dynamic batcher grouped are concatenated along the batch axis, run
// as one ORT call, and the rows are handed back per request. It reads the same settings Triton's
// onnxruntime backend reads from the model config (parameters intra_op_thread_count and
// inter_op_thread_count, optimization.graph.level, max_batch_size), and two parameters the bench's
// repository builder adds: onnx_path (the shipped file) and ort_library (the libonnxruntime to load).
// Without them (a shipped config, served as-is from a backend directory where this library is installed
// as onnxruntime/libtriton_onnxruntime.so: pipeline/serving/install.py), it serves
// <version dir>/<default_model_filename or model.onnx> with the library $PIPELINE_ORT_LIBRARY names.
//
// Build: pipeline/serving/native_backend.py (g++, the ORT C/C++ API headers, no link-time deps:
// Triton's symbols come from the server process, ONNX Runtime is dlopen()ed from the path in the
// ort_library parameter, i.e. the same libonnxruntime the Python side measures in process).

#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>

#include <dlfcn.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "triton_api.h"

namespace {

uint64_t now_ns() {
  // Triton's own timestamps (queue start) use steady_clock: the stats must use the same clock.
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TRITONSERVER_Error* make_error(const std::string& msg, TRITONSERVER_Error_Code code = TRITONSERVER_ERROR_INTERNAL) {
  return TRITONSERVER_ErrorNew(code, ("pipeline_ort: " + msg).c_str());
}

// Turn a Triton API error into an exception (and free it), so the happy path reads straight.
void check(TRITONSERVER_Error* e, const char* what) {
  if (e == nullptr) return;
  std::string msg = std::string(what) + ": " + TRITONSERVER_ErrorMessage(e);
  TRITONSERVER_ErrorDelete(e);
  throw std::runtime_error(msg);
}

struct Settings {
  std::string onnx_path, ort_library;
  int intra_op_threads = 0, inter_op_threads = 0, graph_level = 0;
  int64_t max_batch_size = 0;
};

// protobuf's JSON writes int64 as strings and int32 as numbers: accept both.
int64_t as_int(const nlohmann::json& v) { return v.is_string() ? std::stoll(v.get<std::string>()) : v.get<int64_t>(); }

// The model config's ``parameters { key: K value { string_value: V } }``; ``fallback`` when absent or empty.
std::string parameter(const nlohmann::json& cfg, const char* key, const std::string& fallback = "") {
  auto params = cfg.find("parameters");
  if (params == cfg.end() || !params->contains(key)) return fallback;
  std::string v = (*params)[key].value("string_value", "");
  return v.empty() ? fallback : v;
}

// Read what Triton's onnxruntime backend reads from the model config (thread counts, graph level), plus the
// file to serve and the ORT library, which the bench's repository builder adds as parameters.
Settings read_settings(TRITONBACKEND_Model* model) {
  TRITONSERVER_Message* msg = nullptr;
  check(TRITONBACKEND_ModelConfig(model, 1, &msg), "model config");
  const char* base = nullptr;
  size_t size = 0;
  TRITONSERVER_Error* e = TRITONSERVER_MessageSerializeToJson(msg, &base, &size);
  nlohmann::json cfg = e == nullptr ? nlohmann::json::parse(base, base + size) : nlohmann::json();
  TRITONSERVER_MessageDelete(msg);
  check(e, "model config as JSON");
  Settings s;
  s.onnx_path = parameter(cfg, "onnx_path");
  if (s.onnx_path.empty()) {  // a shipped config: the version directory's file, as Triton's onnxruntime backend finds it
    TRITONBACKEND_ArtifactType kind;
    const char* location = nullptr;
    uint64_t version = 0;
    check(TRITONBACKEND_ModelRepository(model, &kind, &location), "model repository");
    check(TRITONBACKEND_ModelVersion(model, &version), "model version");
    std::string file = cfg.value("default_model_filename", "");
    s.onnx_path = std::string(location) + "/" + std::to_string(version) + "/" + (file.empty() ? "model.onnx" : file);
  }
  const char* env_library = std::getenv("PIPELINE_ORT_LIBRARY");
  s.ort_library = parameter(cfg, "ort_library", env_library ? env_library : "");
  if (s.ort_library.empty())
    throw std::runtime_error("no ONNX Runtime library: set parameter ort_library (the bench's repository builder does) or $PIPELINE_ORT_LIBRARY");
  s.intra_op_threads = std::stoi(parameter(cfg, "intra_op_thread_count", "0"));
  s.inter_op_threads = std::stoi(parameter(cfg, "inter_op_thread_count", "0"));
  if (cfg.contains("max_batch_size")) s.max_batch_size = as_int(cfg["max_batch_size"]);
  auto opt = cfg.find("optimization");
  if (opt != cfg.end() && opt->contains("graph") && (*opt)["graph"].contains("level"))
    s.graph_level = static_cast<int>(as_int((*opt)["graph"]["level"]));
  return s;
}

// ONNX Runtime: loaded once per process, from the library the settings name.
std::mutex ort_mutex;
std::unique_ptr<Ort::Env> ort_env;

void load_ort(const std::string& library) {
  std::lock_guard<std::mutex> lock(ort_mutex);
  if (ort_env) return;
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) throw std::runtime_error("cannot load ONNX Runtime from " + library + ": " + dlerror());
  using GetApiBase = const OrtApiBase* (*)();
  auto get_base = reinterpret_cast<GetApiBase>(dlsym(handle, "OrtGetApiBase"));
  if (get_base == nullptr) throw std::runtime_error(library + " exports no OrtGetApiBase");
  const OrtApi* api = get_base()->GetApi(ORT_API_VERSION);
  if (api == nullptr)
    throw std::runtime_error(library + " (ONNX Runtime " + get_base()->GetVersionString() + ") does not offer C API version " +
                             std::to_string(ORT_API_VERSION));
  Ort::InitApi(api);
  ort_env = std::make_unique<Ort::Env>(ORT_LOGGING_LEVEL_WARNING, "pipeline_ort");
}

// Same mapping as Triton's onnxruntime backend: absent/0 = all, -1 = basic, 1 = extended, 2 = off.
GraphOptimizationLevel graph_level(int level) {
  switch (level) {
    case -1: return ORT_ENABLE_BASIC;
    case 1: return ORT_ENABLE_EXTENDED;
    case 2: return ORT_DISABLE_ALL;
    default: return ORT_ENABLE_ALL;
  }
}

struct TypeMap {
  TRITONSERVER_DataType triton;
  ONNXTensorElementDataType ort;
  size_t bytes;
};
constexpr TypeMap kTypes[] = {
    {TRITONSERVER_TYPE_BOOL, ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL, 1},
    {TRITONSERVER_TYPE_UINT8, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8, 1},
    {TRITONSERVER_TYPE_UINT16, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16, 2},
    {TRITONSERVER_TYPE_UINT32, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32, 4},
    {TRITONSERVER_TYPE_UINT64, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64, 8},
    {TRITONSERVER_TYPE_INT8, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8, 1},
    {TRITONSERVER_TYPE_INT16, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16, 2},
    {TRITONSERVER_TYPE_INT32, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32, 4},
    {TRITONSERVER_TYPE_INT64, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, 8},
    {TRITONSERVER_TYPE_FP16, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16, 2},
    {TRITONSERVER_TYPE_FP32, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, 4},
    {TRITONSERVER_TYPE_FP64, ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE, 8},
    {TRITONSERVER_TYPE_BF16, ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16, 2},
};

const TypeMap& by_triton(TRITONSERVER_DataType t) {
  for (const auto& m : kTypes)
    if (m.triton == t) return m;
  throw std::runtime_error("input datatype " + std::to_string(t) + " is not supported (BYTES/strings are not)");
}

const TypeMap& by_ort(ONNXTensorElementDataType t) {
  for (const auto& m : kTypes)
    if (m.ort == t) return m;
  throw std::runtime_error("ONNX Runtime output element type " + std::to_string(t) + " is not supported");
}

struct ModelState {
  Settings settings;
};

struct InstanceState {
  TRITONBACKEND_ModelInstance* instance;
  bool batched;
  std::unique_ptr<Ort::Session> session;
  std::vector<std::string> inputs, outputs;
  std::vector<const char*> input_ptrs, output_ptrs;
  Ort::MemoryInfo cpu = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);

  InstanceState(TRITONBACKEND_ModelInstance* inst, const Settings& s) : instance(inst), batched(s.max_batch_size > 0) {
    Ort::SessionOptions opts;
    // Triton's onnxruntime backend leaves ORT's defaults (0 = ORT decides) when a key is absent.
    opts.SetIntraOpNumThreads(s.intra_op_threads);
    opts.SetInterOpNumThreads(s.inter_op_threads);
    opts.SetGraphOptimizationLevel(graph_level(s.graph_level));
    session = std::make_unique<Ort::Session>(*ort_env, s.onnx_path.c_str(), opts);
    Ort::AllocatorWithDefaultOptions alloc;
    for (size_t i = 0; i < session->GetInputCount(); ++i) inputs.emplace_back(session->GetInputNameAllocated(i, alloc).get());
    for (size_t i = 0; i < session->GetOutputCount(); ++i) outputs.emplace_back(session->GetOutputNameAllocated(i, alloc).get());
    for (auto& n : inputs) input_ptrs.push_back(n.c_str());
    for (auto& n : outputs) output_ptrs.push_back(n.c_str());
  }

  // One ORT run for ``reqs`` (a batch Triton formed, or a single request of an unbatched model).
  void run(const std::vector<TRITONBACKEND_Request*>& reqs) {
    const uint64_t exec_start = now_ns();
    uint64_t compute_start = 0, compute_end = 0;
    std::vector<int64_t> rows(reqs.size(), 1);
    std::vector<Ort::Value> outs;
    std::string failure;
    try {
      std::vector<Ort::Value> feeds;
      std::vector<std::vector<char>> owned(inputs.size());  // concatenated inputs; must outlive Run()
      for (size_t k = 0; k < inputs.size(); ++k) feeds.push_back(gather(reqs, k, rows, owned[k]));
      compute_start = now_ns();
      outs = session->Run(Ort::RunOptions{nullptr}, input_ptrs.data(), feeds.data(), feeds.size(), output_ptrs.data(),
                          output_ptrs.size());
      compute_end = now_ns();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    int64_t total = 0, offset = 0;
    for (auto r : rows) total += r;
    std::vector<bool> ok(reqs.size(), false);
    for (size_t i = 0; i < reqs.size(); ++i) {
      ok[i] = respond(reqs[i], failure, outs, offset, rows[i], total);
      offset += rows[i];
    }
    const uint64_t exec_end = now_ns();
    bool any = false;
    for (size_t i = 0; i < reqs.size(); ++i) {
      any = any || ok[i];
      report(TRITONBACKEND_ModelInstanceReportStatistics(instance, reqs[i], ok[i], exec_start, compute_start, compute_end, exec_end));
    }
    if (any) report(TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, total, exec_start, compute_start, compute_end, exec_end));
    for (auto r : reqs) report(TRITONBACKEND_RequestRelease(r, TRITONSERVER_REQUEST_RELEASE_ALL));
  }

 private:
  static void report(TRITONSERVER_Error* e) {
    if (e != nullptr) TRITONSERVER_ErrorDelete(e);  // nothing left to tell the client; Triton logs its own side
  }

  // Input ``k`` of every request as one ORT tensor; single-buffer, single-request inputs are not copied.
  Ort::Value gather(const std::vector<TRITONBACKEND_Request*>& reqs, size_t k, std::vector<int64_t>& rows,
                    std::vector<char>& owned) {
    const char* name = inputs[k].c_str();
    std::vector<TRITONBACKEND_Input*> ins(reqs.size());
    std::vector<int64_t> shape;
    TRITONSERVER_DataType dtype = TRITONSERVER_TYPE_INVALID;
    uint64_t total_bytes = 0;
    uint32_t first_buffers = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      check(TRITONBACKEND_RequestInput(reqs[i], name, &ins[i]), ("request has no input '" + inputs[k] + "'").c_str());
      TRITONSERVER_DataType t;
      const int64_t* dims;
      uint32_t ndims, buffers;
      uint64_t bytes;
      check(TRITONBACKEND_InputProperties(ins[i], nullptr, &t, &dims, &ndims, &bytes, &buffers), "input properties");
      std::vector<int64_t> s(dims, dims + ndims);
      if (i == 0) {
        shape = s, dtype = t, first_buffers = buffers;
      } else if (t != dtype || s.size() != shape.size() || (!s.empty() && !std::equal(s.begin() + 1, s.end(), shape.begin() + 1))) {
        throw std::runtime_error("input '" + inputs[k] + "': requests in one batch differ in datatype or shape");
      }
      if (batched) {
        if (s.empty()) throw std::runtime_error("input '" + inputs[k] + "' has no batch dimension");
        if (k == 0) rows[i] = s[0];
        else if (rows[i] != s[0]) throw std::runtime_error("input '" + inputs[k] + "': batch size differs from other inputs");
      }
      total_bytes += bytes;
    }
    const TypeMap& type = by_triton(dtype);
    if (batched) {
      shape[0] = 0;
      for (auto r : rows) shape[0] += r;
    }
    void* data = nullptr;
    if (reqs.size() == 1 && first_buffers == 1) {
      const void* buf;
      uint64_t size;
      TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
      int64_t mt_id = 0;
      check(TRITONBACKEND_InputBuffer(ins[0], 0, &buf, &size, &mt, &mt_id), "input buffer");
      if (mt == TRITONSERVER_MEMORY_GPU) throw std::runtime_error("input '" + inputs[k] + "' is in GPU memory");
      data = const_cast<void*>(buf);  // ORT reads its inputs, never writes them
    } else {
      owned.resize(total_bytes);
      size_t at = 0;
      for (auto in : ins) {
        uint32_t buffers;
        check(TRITONBACKEND_InputProperties(in, nullptr, nullptr, nullptr, nullptr, nullptr, &buffers), "input properties");
        for (uint32_t b = 0; b < buffers; ++b) {
          const void* buf;
          uint64_t size;
          TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
          int64_t mt_id = 0;
          check(TRITONBACKEND_InputBuffer(in, b, &buf, &size, &mt, &mt_id), "input buffer");
          if (mt == TRITONSERVER_MEMORY_GPU) throw std::runtime_error("input '" + inputs[k] + "' is in GPU memory");
          std::memcpy(owned.data() + at, buf, size);
          at += size;
        }
      }
      data = owned.data();
    }
    return Ort::Value::CreateTensor(cpu, data, total_bytes, shape.data(), shape.size(), type.ort);
  }

  // Send request ``req`` its rows [offset, offset + n) of every output it asked for; false if it got an error.
  bool respond(TRITONBACKEND_Request* req, const std::string& failure, std::vector<Ort::Value>& outs, int64_t offset,
               int64_t n, int64_t total) {
    TRITONBACKEND_Response* resp = nullptr;
    if (TRITONBACKEND_ResponseNew(&resp, req) != nullptr) return false;
    std::string problem = failure;
    if (problem.empty()) {
      try {
        uint32_t count;
        check(TRITONBACKEND_RequestOutputCount(req, &count), "output count");
        for (uint32_t o = 0; o < count; ++o) {
          const char* name;
          check(TRITONBACKEND_RequestOutputName(req, o, &name), "output name");
          size_t j = 0;
          while (j < outputs.size() && outputs[j] != name) ++j;
          if (j == outputs.size()) throw std::runtime_error(std::string("the model has no output '") + name + "'");
          auto info = outs[j].GetTensorTypeAndShapeInfo();
          std::vector<int64_t> shape = info.GetShape();
          const TypeMap& type = by_ort(info.GetElementType());
          size_t bytes = info.GetElementCount() * type.bytes, begin = 0;
          if (batched) {
            if (shape.empty() || shape[0] != total)
              throw std::runtime_error(std::string("output '") + name + "' does not keep the batch dimension first");
            const size_t row = total ? bytes / total : 0;
            begin = offset * row, bytes = n * row, shape[0] = n;
          }
          TRITONBACKEND_Output* out;
          check(TRITONBACKEND_ResponseOutput(resp, &out, name, type.triton, shape.data(), shape.size()), "response output");
          void* buf;
          TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
          int64_t mt_id = 0;
          check(TRITONBACKEND_OutputBuffer(out, &buf, bytes, &mt, &mt_id), "output buffer");
          if (mt == TRITONSERVER_MEMORY_GPU) throw std::runtime_error("Triton gave a GPU output buffer");
          std::memcpy(buf, outs[j].GetTensorData<char>() + begin, bytes);
        }
      } catch (const std::exception& e) {
        problem = e.what();
      }
    }
    TRITONSERVER_Error* err = problem.empty() ? nullptr : make_error(problem);
    TRITONSERVER_Error* sent = TRITONBACKEND_ResponseSend(resp, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err);
    if (err != nullptr) TRITONSERVER_ErrorDelete(err);  // ResponseSend does not take ownership of it
    if (sent != nullptr) {
      TRITONSERVER_ErrorDelete(sent);
      return false;
    }
    return problem.empty();
  }
};

}  // namespace

extern "C" {

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend*) {
  uint32_t major = 0, minor = 0;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ApiVersion(&major, &minor)) return e;
  if (major != PIPELINE_ORT_API_MAJOR)
    return make_error("built for TRITONBACKEND API " + std::to_string(PIPELINE_ORT_API_MAJOR) + ".x, the server has " +
                          std::to_string(major) + "." + std::to_string(minor),
                      TRITONSERVER_ERROR_UNSUPPORTED);
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  try {
    auto state = std::make_unique<ModelState>();
    state->settings = read_settings(model);
    load_ort(state->settings.ort_library);
    check(TRITONBACKEND_ModelSetState(model, state.get()), "set model state");
    state.release();
  } catch (const std::exception& e) {
    return make_error(e.what(), TRITONSERVER_ERROR_INVALID_ARG);
  }
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* state = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelState(model, &state)) return e;
  delete static_cast<ModelState*>(state);
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance) {
  try {
    TRITONBACKEND_Model* model;
    void* ms = nullptr;
    check(TRITONBACKEND_ModelInstanceModel(instance, &model), "instance model");
    check(TRITONBACKEND_ModelState(model, &ms), "model state");
    auto state = std::make_unique<InstanceState>(instance, static_cast<ModelState*>(ms)->settings);
    check(TRITONBACKEND_ModelInstanceSetState(instance, state.get()), "set instance state");
    state.release();
  } catch (const std::exception& e) {
    return make_error(std::string("cannot create the ONNX Runtime session: ") + e.what());
  }
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
  void* state = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceState(instance, &state)) return e;
  delete static_cast<InstanceState*>(state);
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t count) {
  void* vs = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceState(instance, &vs)) return e;
  auto* state = static_cast<InstanceState*>(vs);
  if (state->batched) {
    state->run(std::vector<TRITONBACKEND_Request*>(requests, requests + count));
  } else {
    for (uint32_t i = 0; i < count; ++i) state->run({requests[i]});
  }
  return nullptr;  // every request was answered and released
}

}  // extern "C"
