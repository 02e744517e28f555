#pragma once
#include <memory>
#include <string>

#include "kiln/core/tensor.h"
#include "kiln/data/dataset.h"

namespace kiln::data {

// One file of the CIFAR-10 binary distribution (cifar-10-batches-bin): records of 1 label byte
// (0..9) followed by 3072 pixel bytes, the 32x32 red plane, then green, then blue.
struct Cifar10Batch {
  Tensor images;  // uint8 [N, 3, 32, 32]
  Tensor labels;  // int64 [N]
};

// Reads one batch file (data_batch_<k>.bin or test_batch.bin). A missing or empty file, a size
// that is not a whole number of 3073-byte records (the error gives the offset of the incomplete
// record) or a label above 9 (the error gives the record index and its offset) is a kiln::Error
// naming the file.
Cifar10Batch read_cifar10_batch(const std::string& path, const Loc& loc = Loc::current());

// CIFAR-10 from `dir`, the unpacked cifar-10-batches-bin folder (or a folder holding it). split
// "train" concatenates data_batch_1.bin .. data_batch_5.bin in that order, "test" reads
// test_batch.bin. dtype Float32 (the default, as fashion_mnist) gives images in [0, 1] (byte /
// 255); UInt8 keeps the bytes. Images are [N, 3, 32, 32], labels int64 [N].
std::shared_ptr<TensorDataset> cifar10(const std::string& dir, const std::string& split,
                                       DType dtype = DType::Float32,
                                       const Loc& loc = Loc::current());

}  // namespace kiln::data
