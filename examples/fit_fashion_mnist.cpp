// The README's Keras-style example, compiled so that it stays true: trains the small CNN on
// Fashion-MNIST with Trainer::fit, callbacks and curves. Usage: fit_fashion_mnist [epochs]
#include <cstdlib>
#include <iostream>

#include "kiln/kiln.h"

int main(int argc, char** argv) {
  using namespace kiln;
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 10;

  auto train = data::fashion_mnist("/usr/share/datasets/fashion-mnist", "train");
  auto test = data::fashion_mnist("/usr/share/datasets/fashion-mnist", "test");
  data::DataLoader train_loader(train, {.batch_size = 128, .shuffle = true, .num_workers = 1});
  data::DataLoader test_loader(test, {.batch_size = 500});

  manual_seed(0);
  auto model = nn::small_cnn();
  optim::Adam adam(model->parameters(), {.lr = 1e-3});
  train::Trainer trainer(
      *model, adam, [](const Tensor& logits, const Tensor& y) { return cross_entropy(logits, y); },
      {"accuracy"});
  trainer.add_callback(std::make_shared<train::EarlyStopping>("val_loss", /*patience=*/3));
  trainer.add_callback(std::make_shared<train::CSVLogger>("history.csv"));
  train::History history =
      trainer.fit(train_loader, {.epochs = epochs, .validation = &test_loader});
  train::write_training_curves(history, "curves.svg");
  train::Logs result = trainer.evaluate(test_loader);  // {"loss": ..., "accuracy": ...}
  std::cout << "test accuracy " << result.at("accuracy") << "\n";
}
