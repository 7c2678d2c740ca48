pub mod painless;
