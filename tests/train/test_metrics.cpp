#include <gtest/gtest.h>

#include <vector>

#include "kiln/core/error.h"
#include "kiln/ops/factories.h"
#include "kiln/train/metrics.h"

namespace kiln::train {
namespace {

// Predictions (argmax) 0, 1, 2, 1 against labels 0, 2, 2, 1.
Tensor sample_logits() {
  return kiln::tensor<double>({2, 1, 0, 0, 3, 1, 1, 0, 2, 0, 1, 0.5}, Shape{4, 3});
}
Tensor sample_labels() {
  return kiln::tensor<int64_t>({0, 2, 2, 1});
}

TEST(Metrics, Mean) {
  Mean mean;
  EXPECT_EQ(mean.result(), 0.0);
  mean.update(1.0, 3);
  mean.update(3.0, 1);
  EXPECT_DOUBLE_EQ(mean.result(), 1.5);
  mean.reset();
  mean.update(2.0);
  EXPECT_DOUBLE_EQ(mean.result(), 2.0);
}

TEST(Metrics, AccuracyStreams) {
  Accuracy acc;
  EXPECT_EQ(acc.name(), "accuracy");
  acc.update(sample_logits(), sample_labels());
  EXPECT_DOUBLE_EQ(acc.result(), 0.75);
  // Ties go to the lower index, as argmax: [1, 1] predicts 0.
  acc.update(kiln::tensor<float>({1, 1, 1, 1}, Shape{2, 2}), kiln::tensor<int64_t>({1, 0}));
  EXPECT_DOUBLE_EQ(acc.result(), 4.0 / 6.0);
  acc.reset();
  EXPECT_EQ(acc.result(), 0.0);
}

TEST(Metrics, TopK) {
  TopKAccuracy top2(2);
  EXPECT_EQ(top2.name(), "top2_accuracy");
  top2.update(sample_logits(), sample_labels());
  EXPECT_DOUBLE_EQ(top2.result(), 1.0);
  // Label 0 ranks third in [0, 2, 1].
  top2.update(kiln::tensor<double>({0, 2, 1}, Shape{1, 3}), kiln::tensor<int64_t>({0}));
  EXPECT_DOUBLE_EQ(top2.result(), 0.8);
  EXPECT_THROW(TopKAccuracy(0), Error);
}

TEST(Metrics, ConfusionMatrixMacroScores) {
  // Per class (P, R): 0 -> (1, 1), 1 -> (1/2, 1), 2 -> (1, 1/2); class 3 never occurs and is
  // left out of the averages.
  ConfusionMatrix cm(4);
  EXPECT_THROW(cm.update(sample_logits(), sample_labels()), Error);  // 3 classes, not 4
  ConfusionMatrix cm3(0);
  cm3.update(sample_logits().narrow(0, 0, 2), sample_labels().narrow(0, 0, 2));
  cm3.update(sample_logits().narrow(0, 2, 2), sample_labels().narrow(0, 2, 2));
  EXPECT_EQ(cm3.num_classes(), 3);
  EXPECT_EQ(cm3.count(2, 1), 1);
  EXPECT_EQ(cm3.count(1, 1), 1);
  EXPECT_EQ(cm3.count(2, 2), 1);
  EXPECT_DOUBLE_EQ(cm3.precision(), 2.5 / 3);
  EXPECT_DOUBLE_EQ(cm3.recall(), 2.5 / 3);
  EXPECT_NEAR(cm3.f1(), (1.0 + 2.0 / 3 + 2.0 / 3) / 3, 1e-12);
  EXPECT_EQ(cm3.name(), "f1");
  EXPECT_DOUBLE_EQ(cm3.result(), cm3.f1());

  ConfusionMatrix padded(5, ConfusionMatrix::Score::Recall);
  padded.update(kiln::tensor<double>({2, 1, 0, 0, 0, 0, 3, 1, 0, 0, 1, 0, 2, 0, 0, 0, 1, .5, 0, 0},
                                     Shape{4, 5}),
                sample_labels());
  EXPECT_DOUBLE_EQ(padded.result(), 2.5 / 3);
}

TEST(Metrics, Factory) {
  EXPECT_EQ(make_metric("accuracy")->name(), "accuracy");
  EXPECT_EQ(make_metric("acc")->name(), "accuracy");
  EXPECT_EQ(make_metric("top5_accuracy")->name(), "top5_accuracy");
  EXPECT_EQ(make_metric("precision")->name(), "precision");
  EXPECT_EQ(make_metric("recall")->name(), "recall");
  EXPECT_EQ(make_metric("f1")->name(), "f1");
  try {
    make_metric("auc");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[make_metric]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("\"auc\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test_metrics.cpp"), std::string::npos) << e.what();
  }
}

TEST(Metrics, BadInputsNameShapes) {
  Accuracy acc;
  try {
    acc.update(kiln::tensor<double>({1, 2, 3}), kiln::tensor<int64_t>({0}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[accuracy]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test_metrics.cpp"), std::string::npos) << e.what();
  }
  EXPECT_THROW(acc.update(sample_logits(), kiln::tensor<int64_t>({0, 1, 3, 0})), Error);
  EXPECT_THROW(acc.update(sample_logits(), kiln::tensor<double>({0, 1, 2, 0})), Error);
  EXPECT_THROW(acc.update(sample_logits(), kiln::tensor<int64_t>({0, 1})), Error);
}

}  // namespace
}  // namespace kiln::train
