#include "convert/fold_float.h"

#include "convert/convert.h"
#include "model/model_source.h"
#include "quant/rtn_quantizer.h"
#include "rotate/rotation_transform.h"

namespace tq {

Status write_float_model(const std::string& source, const std::vector<WeightTransform*>& transforms,
                         const std::string& dest) {
  ConvertOptions o;
  o.source = source;
  o.dest = dest;
  o.force = true;
  o.record_timings = false;
  o.dtype = DType::kF32;
  o.plan.keep_float = {"*"};
  TQ_TRY(ConvertJob job, prepare_convert(o, transforms));
  RtnQuantizer rtn;  // nothing to quantize
  TQ_TRY(ConvertSummary s, run_convert(job, rtn, o));
  (void)s;
  return ok_status();
}

Status write_folded_float(const std::string& source, const RotationOptions& ro,
                          const std::string& dest) {
  TQ_TRY(ModelSource src, open_model(source));
  TQ_TRY(std::unique_ptr<RotationTransform> rot, RotationTransform::create(src.config, ro));
  return write_float_model(source, {rot.get()}, dest);
}

}  // namespace tq
