// Chinese edition only (conf.py adds this file for zh_* languages).
// Sphinx 9.0's language_data.js ends with `window.Stemmer = ChineseStemmer;`,
// but the Chinese search language uses the English stemmer and no
// ChineseStemmer exists, so every search stays at "Searching..." (Sphinx issue
// 14229, fixed upstream by pull request 14416). Define it as the English one;
// this file loads before language_data.js, which defines EnglishStemmer.
if (typeof ChineseStemmer === "undefined") {
  var ChineseStemmer = function () {
    return new EnglishStemmer();
  };
}
